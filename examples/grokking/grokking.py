"""Grokking of modular arithmetic, written as a user would: a training function with capgeo attached.

``a + b mod p`` and ``a - b mod p`` (Power et al. 2022, arXiv 2201.02177; Nanda et al. 2023, 2301.05217): every
pair ``(a, b)`` is a question ``a op b =`` with one answer; a fraction of the p * p pairs trains, the rest (up to
2,048 of them, in a fixed order) validates. A one-layer decoder of width 128 learns them with AdamW and weight
decay on minibatches of 512 (Power et al.'s setting). Depending on the training fraction and the weight decay,
training accuracy reaches 1 early and validation accuracy jumps much later (grokking), at once, or never within
the budget. ``control=True`` shuffles the training answers across the training pairs: nothing generalises.

:func:`train` follows Ray Tune's function-trainable convention, ``train(config)``, so the launcher runs it on a
grid (``config["trial_dir"]`` is the run's folder, ``config["resume_from"]`` a checkpoint to resume from or
None). It logs ``train/loss`` and ``train/acc`` (the minibatch's) at every step and ``val/acc`` and ``val/loss``
at every evaluation; capgeo is attached as the README prints it, with the weight norm beside it and every evaluation
measured (``overhead_budget="measure"``), and with ``commutator=True`` the commutator defect on the two halves of a
training batch (its loss: :func:`answer_loss`, since the tuple batches are not capgeo's own layout). With ``stop_at``,
Lightning's ``EarlyStopping`` ends a run once validation accuracy exceeds it (a run that groks need not spend the
rest of its budget). Training batches
are drawn by a generator seeded by (seed, step), so a resumed run sees the batches an unbroken run would.
``python -m examples.grokking --fraction 0.5 --weight-decay 1 --seed 0`` runs one from a shell.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor, nn
from torch.utils.data import DataLoader, IterableDataset

from capgeo_callbacks import (
    CommutatorDefectMonitor,
    EvaluationSchedule,
    LinearProbeMonitor,
    PrecursorDetector,
    RankMeMonitor,
    WeightNormMonitor,
)
from capgeo_callbacks.rules import default_rules
from examples.decoder import Decoder

OPERATIONS = {"add": lambda a, b, p: (a + b) % p, "sub": lambda a, b, p: (a - b) % p}
IGNORE = -100  # F.cross_entropy's ignore_index: positions with no target
VALIDATION = 2048  # held-out pairs evaluated (the first of the shuffled rest)


@dataclass(frozen=True)
class Settings:
    """One run's settings: the task, the data split, the optimiser and the budget."""

    operation: str = "add"
    p: int = 97
    fraction: float = 0.5  # share of the p * p pairs that trains
    weight_decay: float = 1.0
    lr: float = 1e-3
    warmup: int = 10  # steps of linear learning-rate warm-up, then constant
    batch_size: int = 512
    max_steps: int = 5000
    dim: int = 128
    layers: int = 1
    heads: int = 4
    seed: int = 0
    control: bool = False  # training answers shuffled across the training pairs
    stop_at: float | None = None  # stop once validation accuracy exceeds it (EarlyStopping's stopping_threshold)
    commutator: bool = False  # also measure the commutator defect (every 8th evaluation)

    def __post_init__(self) -> None:
        if self.operation not in OPERATIONS:
            raise ValueError(f"unknown operation {self.operation!r}; known: {', '.join(OPERATIONS)}")
        if not 0 < self.fraction < 1:
            raise ValueError(f"fraction must be in (0, 1), got {self.fraction}")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Settings:
        """The settings a launcher's ``config`` names (its own keys, ``trial_dir`` and ``resume_from``, aside)."""
        known = {f.name for f in fields(cls)}
        unknown = set(config) - known - {"trial_dir", "resume_from"}
        if unknown:
            raise ValueError(f"unknown settings {sorted(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**{key: value for key, value in config.items() if key in known})


def pairs(settings: Settings) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """Training and validation ``(inputs, targets)``: inputs ``a op b =`` (N, 4), targets -100 but the answer at
    the last position. The split is a permutation of the pairs seeded by the run's seed."""
    p = settings.p
    a, b = torch.arange(p).repeat_interleave(p), torch.arange(p).repeat(p)
    answer = OPERATIONS[settings.operation](a, b, p)
    inputs = torch.stack([a, torch.full_like(a, p), b, torch.full_like(a, p + 1)], dim=1)  # tokens: 0..p-1, op, =
    targets = torch.full_like(inputs, IGNORE)
    targets[:, -1] = answer
    order = torch.randperm(p * p, generator=torch.Generator().manual_seed(settings.seed))
    train, held_out = order[: round(settings.fraction * p * p)], order[round(settings.fraction * p * p):]
    train_targets = targets[train].clone()
    if settings.control:
        shuffle = torch.randperm(len(train), generator=torch.Generator().manual_seed(settings.seed + 1))
        train_targets[:, -1] = train_targets[shuffle, -1]
    validation = held_out[:VALIDATION]
    return (inputs[train], train_targets), (inputs[validation], targets[validation])


class Minibatches(IterableDataset):
    """Minibatches of the training pairs, drawn at each step by a generator seeded by (seed, step)."""

    def __init__(self, data: tuple[Tensor, Tensor], batch_size: int, seed: int, start: int) -> None:
        self.data, self.batch_size, self.seed, self.start = data, batch_size, seed, start

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        step = self.start
        while True:
            generator = torch.Generator().manual_seed(1_000_003 * self.seed + step)
            rows = torch.randint(0, len(self.data[0]), (self.batch_size,), generator=generator)
            yield self.data[0][rows], self.data[1][rows]
            step += 1


class ModularArithmetic(pl.LightningDataModule):
    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self.train, self.validation = pairs(settings)

    def train_dataloader(self) -> DataLoader:
        start = self.trainer.global_step if self.trainer is not None else 0  # restored before this is called
        return DataLoader(Minibatches(self.train, self.settings.batch_size, self.settings.seed, start),
                          batch_size=None)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(list(zip(*(part.split(1024) for part in self.validation), strict=True)), batch_size=None)


def answer_loss(logits: Tensor, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Cross-entropy of the answer, read at "=" (the last position): the training loss, as a gradient measure takes
    it (``loss_fn(output, batch)``)."""
    return F.cross_entropy(logits[:, -1], batch[1][:, -1])


class GrokkingModel(pl.LightningModule):
    """The decoder and its head; cross-entropy on the answer position; AdamW with weight decay."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self.model = Decoder(settings.p + 2, 4, settings.dim, settings.layers, settings.heads)
        self.lm_head = nn.Linear(settings.dim, settings.p + 2, bias=False)

    def forward(self, inputs: Tensor) -> Tensor:
        return self.lm_head(self.model(inputs))  # (B, T, vocab)

    def _scores(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        logits = self(batch[0])
        right = logits[:, -1].argmax(-1) == batch[1][:, -1]  # the answer is read at "="
        return answer_loss(logits, batch), right.float().mean()

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        loss, acc = self._scores(batch)
        self.log("train/loss", loss)
        self.log("train/acc", acc)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        loss, acc = self._scores(batch)
        self.log("val/loss", loss, batch_size=len(batch[0]))
        self.log("val/acc", acc, batch_size=len(batch[0]))

    def configure_optimizers(self) -> dict[str, Any]:
        s = self.settings
        optimizer = torch.optim.AdamW(self.parameters(), lr=s.lr, weight_decay=s.weight_decay, betas=(0.9, 0.98))
        warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / s.warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": warmup, "interval": "step"}}


def capgeo_callbacks(settings: Settings | None = None) -> list[pl.Callback]:
    """capgeo as README.md's "On your own model" prints it, and the weight norm (a quiet run: no progress bar), every
    evaluation measured (``overhead_budget="measure"``: the runs are data; the default budget would thin them); with
    ``settings.commutator``, the commutator defect on the two halves of a training batch."""
    commutator = [CommutatorDefectMonitor(loss_fn=answer_loss, batch_size=settings.batch_size)] \
        if settings is not None and settings.commutator else []
    return [
        EvaluationSchedule(points=256),
        RankMeMonitor(layers=["model.layers.*", "model.norm"], selector="last", num_rows=512),
        LinearProbeMonitor(layers="model.norm", every_n_evals=4),
        WeightNormMonitor(layers="model.layers.*"),
        *commutator,
        PrecursorDetector(monitor="val/acc", rules=default_rules(),
                          overhead_budget="measure"),  # every evaluation measured, capgeo's share still said
    ]


def train(config: Mapping[str, Any]) -> None:
    """Train one run (Ray Tune's function convention): ``config`` holds :class:`Settings` fields, ``trial_dir``
    (default ``runs/grokking/<name>``) and ``resume_from`` (a checkpoint, or None). Leaves ``capgeo_summary.json``,
    the TensorBoard log, ``checkpoints/last.ckpt`` and ``run.json`` (the settings and the CPU seconds of each part)
    in the run's folder."""
    settings = Settings.from_config(config)
    folder = Path(config.get("trial_dir") or f"runs/grokking/{run_name(settings)}")
    folder.mkdir(parents=True, exist_ok=True)
    started, wall = time.process_time(), time.perf_counter()
    pl.seed_everything(settings.seed, verbose=False)
    model, data = GrokkingModel(settings), ModularArithmetic(settings)
    checkpoints = ModelCheckpoint(dirpath=folder / "checkpoints", save_last=True, save_top_k=0,
                                  every_n_train_steps=500)
    stopping = [] if settings.stop_at is None else [  # once grokked: stop at the threshold, never for a plateau
        EarlyStopping("val/acc", mode="max", stopping_threshold=settings.stop_at, patience=settings.max_steps,
                      check_on_train_epoch_end=False)]
    trainer = Trainer(max_steps=settings.max_steps, logger=TensorBoardLogger(folder, name="", version=""),
                      callbacks=[*capgeo_callbacks(settings), checkpoints, *stopping], enable_progress_bar=False,
                      enable_model_summary=False)
    trainer.fit(model, datamodule=data, ckpt_path=config.get("resume_from"))

    record_path = folder / "run.json"
    record: dict[str, Any] = json.loads(record_path.read_text()) if record_path.exists() else {"parts": []}
    record.update(settings=asdict(settings), threads=torch.get_num_threads(),
                  omp_num_threads=os.environ.get("OMP_NUM_THREADS"))
    record["parts"].append({"from_checkpoint": config.get("resume_from") is not None,
                            "cpu_seconds": round(time.process_time() - started, 1),
                            "wall_seconds": round(time.perf_counter() - wall, 1), "steps": trainer.global_step})
    record["cpu_seconds"] = round(sum(part["cpu_seconds"] for part in record["parts"]), 1)
    record_path.write_text(json.dumps(record, indent=1) + "\n")


def run_name(settings: Settings) -> str:
    """``add-f0.5-wd1-s0`` (``-control`` for a control)."""
    return (f"{settings.operation}-f{settings.fraction:g}-wd{settings.weight_decay:g}-s{settings.seed}"
            f"{'-control' if settings.control else ''}")
