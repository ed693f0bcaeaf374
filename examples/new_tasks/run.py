"""Run one task family at one seed, with capgeo attached as the README's "With Lightning" prints it.

``train(config)`` is the training function (Ray Tune's function trainable, what the launcher calls:
docs/sweeps.md): ``config`` holds ``family``, ``seed``, ``control`` and any of :class:`Settings`' fields (the
family's :data:`SETTINGS` for the others), and the launcher's ``trial_dir`` and ``resume_from``. It leaves
``capgeo_summary.json`` (capgeo's record of the run) and ``run.json`` (the family, seed, control, settings, budget
and the CPU seconds each part of the run took) in ``trial_dir``, and checkpoints every ``checkpoint_every`` steps
in ``trial_dir/checkpoints``. The detector is told the budget and the warm-up before the run (its ``run_info``),
as a user who knows them would tell it; ``run.json`` records the device it trained on too. A run resumed from its
last checkpoint sees the batches an unbroken run would: they depend on (seed, step) only.

``run("recall", seed=1000)`` calls it in this process, in ``runs/new_tasks/recall-s1000/``, resuming from the
folder's checkpoint where there is one; ``python -m examples.new_tasks FAMILY --seed N [--control]`` does the same
from a shell.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger

from capgeo_callbacks import (
    EvaluationSchedule,
    LinearProbeMonitor,
    PrecursorDetector,
    RankMeMonitor,
    StepProgressBar,
    WeightNormMonitor,
)
from examples.new_tasks.model import AnswerLM
from examples.new_tasks.tasks import FAMILIES


@dataclass(frozen=True)
class Settings:
    """A family's model, optimiser and budget (chosen on pilot seeds: PILOTS.md)."""

    max_steps: int
    dim: int = 32
    layers: int = 2
    heads: int = 4
    lr: float = 2e-3
    warmup: int = 20
    cosine: bool = False  # the learning rate decays along a cosine to 0 at max_steps (else constant)
    batch_size: int = 64

    @property
    def tag(self) -> str:
        """A short name of the settings (pilot folders)."""
        return (f"d{self.dim}x{self.layers}-lr{self.lr:g}-w{self.warmup}-b{self.max_steps}"
                f"{'-cosine' if self.cosine else ''}")


SETTINGS: dict[str, Settings] = {
    "recall": Settings(max_steps=1200),
    "dyck": Settings(max_steps=560, dim=48, cosine=True),
    "division": Settings(max_steps=1500),
    "sum3": Settings(max_steps=1500, lr=1e-3),
}


def readme_callbacks() -> list[Callback]:
    """The callbacks of README.md's "With Lightning", as printed there (the registered new-task runs were made with
    the README's callbacks of their commit, recorded in their summaries)."""
    return [
        EvaluationSchedule(points=256),  # validate at step 0, densely early, then evenly
        RankMeMonitor(),
        LinearProbeMonitor(every_n_evals=4),
        WeightNormMonitor(),
        PrecursorDetector(on_alert=print),
        StepProgressBar(),
    ]


def run_name(family: str, seed: int, control: bool) -> str:
    return f"{family}{'-control' if control else ''}-s{seed}"


def train(config: dict[str, Any]) -> None:
    """Train ``config["family"]`` at ``config["seed"]`` (answers shuffled across examples if ``config["control"]``)
    in ``config["trial_dir"]``, from ``config["resume_from"]`` if not None (module docstring).

    Raises:
        ValueError: an unknown family, or a setting that is not one of :class:`Settings`' fields.
    """
    family, seed, control = config["family"], config["seed"], bool(config.get("control", False))
    if family not in FAMILIES:
        raise ValueError(f"unknown task family {family!r}; known: {', '.join(FAMILIES)}")
    names = {field.name for field in fields(Settings)}
    unknown = sorted(set(config) - names - {"family", "seed", "control", "checkpoint_every", "trial_dir",
                                            "resume_from"})
    if unknown:
        raise ValueError(f"unknown setting(s) {', '.join(unknown)}; valid: {', '.join(sorted(names))}")
    settings = Settings(**{**asdict(SETTINGS[family]), **{key: config[key] for key in names if key in config}})
    folder, resume_from = Path(config["trial_dir"]), config["resume_from"]
    folder.mkdir(parents=True, exist_ok=True)
    record_path = folder / "run.json"
    record: dict[str, Any] = json.loads(record_path.read_text()) if record_path.exists() else {"parts": []}
    started, wall = time.process_time(), time.perf_counter()

    pl.seed_everything(seed)
    data = FAMILIES[family](seed=seed, control=control, batch_size=settings.batch_size)
    model = AnswerLM(data.vocab, data.length(), dim=settings.dim, layers=settings.layers, heads=settings.heads,
                     lr=settings.lr, warmup=settings.warmup,
                     decay_steps=settings.max_steps if settings.cosine else None)
    checkpoints = ModelCheckpoint(dirpath=folder / "checkpoints", save_last=True, save_top_k=0,
                                  every_n_train_steps=config.get("checkpoint_every", 200))
    quiet = [callback for callback in readme_callbacks() if not isinstance(callback, StepProgressBar)]  # a log file
    for callback in quiet:  # what is known before the run, given live so that a replay of the summary says the same
        if isinstance(callback, PrecursorDetector):
            callback.session.add_run_info({"max_steps": settings.max_steps, "warmup_steps": settings.warmup})
    trainer = Trainer(max_steps=settings.max_steps, logger=TensorBoardLogger(folder, name="", version=""),
                      callbacks=[*quiet, checkpoints], enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, datamodule=data, ckpt_path=resume_from)

    record.update(family=family, seed=seed, control=control, settings=asdict(settings),
                  threads=torch.get_num_threads(), omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
                  device=str(trainer.strategy.root_device))
    record["parts"].append({"from_checkpoint": resume_from is not None,
                            "cpu_seconds": round(time.process_time() - started, 1),
                            "wall_seconds": round(time.perf_counter() - wall, 1), "steps": trainer.global_step})
    record["cpu_seconds"] = round(sum(part["cpu_seconds"] for part in record["parts"]), 1)
    record_path.write_text(json.dumps(record, indent=1) + "\n")


def run(family: str, seed: int, control: bool = False, root: str | Path = "runs/new_tasks",
        settings: Settings | None = None, checkpoint_every: int = 200) -> Path:
    """:func:`train` in this process, in ``root/<run_name>``, resumed from its checkpoint where there is one;
    returns the run folder.

    Raises:
        ValueError: an unknown family.
    """
    folder = Path(root) / run_name(family, seed, control)
    last = folder / "checkpoints" / "last.ckpt"
    train({"family": family, "seed": seed, "control": control, **(asdict(settings) if settings else {}),
           "checkpoint_every": checkpoint_every, "trial_dir": str(folder),
           "resume_from": str(last) if last.exists() else None})
    return folder
