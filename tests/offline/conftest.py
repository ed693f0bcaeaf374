"""Fixtures of the offline-analysis tests: tiny Hugging Face revisions and a probe file, and one short real
training run with the live callbacks, the rules offline analysis compares, and a checkpoint after every
evaluation."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch import Callback, Trainer, seed_everything
from torch.utils.data import DataLoader

from capgeo_callbacks import DetectionSettings, LinearProbeMonitor, PrecursorDetector, RankMeMonitor
from capgeo_callbacks.offline import analyze
from capgeo_callbacks.rules import RankMeRecoveryRule, make_rule
from capgeo_callbacks.run.summary import SUMMARY_FILENAME

REL = 1e-6
N_LAYERS, VOCAB, SEQ, N_SEQ = 3, 64, 12, 96
# offline label -> live RankMeMonitor tag (module names with the shared "lm.gpt_neox." dropped)
LIVE_TAG = {"embed": "embed_in", "layers.0": "layers.0", "layers.1": "layers.1",
            "layers.2+final_norm": "final_layer_norm"}

# The training run: copy/easy on the xs model learns within 36 steps (acquisition at step 28), and its
# RankMe falls and recovers before that, so these settings raise alerts before acquisition.
TASK, DIFFICULTY, MAX_STEPS, EVERY = "copy", "easy", 36, 4
DM_KWARGS = {"seed": 0, "batch_size": 64, "val_size": 128, "eval_batch_size": 128}
FACTORY = "tasks.datamodule.make_datamodule"  # what train.py records as the run's datamodule_factory
LAYERS = ("model.blocks.*", "model.norm_f")
NUM_ROWS = 256
SETTINGS = DetectionSettings(min_drop=0.1, recovery_fraction=0.05, recovery_evals=1, smoothing=1, patience=2)
PROBE_EVERY = 2  # probes at every other evaluation, as train.py's cadence thins them
# every rule offline analysis is held to (tests/offline/test_parity.py), beside the study's rule on SETTINGS
COMPARED_RULES = ("geometry-guarded", "loss-onset", "logprob-emergence", "probe-crossing", "warmup-end", "clock-20",
                  "token_acc-threshold", "curve-families")


def tiny_neox(seed: int) -> Any:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=N_LAYERS,
                                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(seed)
    return transformers.GPTNeoXForCausalLM(config).eval()


@pytest.fixture(scope="session")
def hf_revisions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """step100..step300 from seeds 0..2, and step1000 a copy of step200 (a duplicate, and 1000 sorts after 300
    only by number)."""
    root = tmp_path_factory.mktemp("hf") / "revisions"
    for name, seed in (("step100", 0), ("step200", 1), ("step300", 2), ("step1000", 1)):
        tiny_neox(seed).save_pretrained(root / name)
    return root


@pytest.fixture(scope="session")
def probe_rows() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (N_SEQ, SEQ + 1), generator=g)
    mask = torch.zeros(N_SEQ, SEQ, dtype=torch.bool)
    mask[:, -2:] = True  # the last two positions are the "answer"
    return {"input_ids": ids[:, :-1], "targets": ids[:, 1:], "answer_mask": mask}


def save_rows(path: Path, rows: dict[str, torch.Tensor], keys: tuple[str, ...]) -> Path:
    torch.save({key: rows[key] for key in keys}, path)
    return path


class HFModule(pl.LightningModule):
    """A Hugging Face causal LM inside a LightningModule: what a user attaching the live callbacks has."""

    def __init__(self, lm: torch.nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.lm(input_ids=batch["input_ids"])


def live_values(folder: Path, rows: dict[str, torch.Tensor], selector: str, num_rows: int,
                probes: bool = False) -> dict[str, float]:
    """Values of the live callbacks (RankMe, and probe accuracy with ``probes``) by tag without the
    ``rankme/`` prefix (``probe_acc/...`` kept), validating the saved revision in a real Trainer."""
    transformers = pytest.importorskip("transformers")
    layers = ["lm.gpt_neox.embed_in", "lm.gpt_neox.layers.*", "lm.gpt_neox.final_layer_norm"]
    callbacks: list[Callback] = [RankMeMonitor(layers=layers, selector=selector, num_rows=num_rows)]
    if probes:
        callbacks.append(LinearProbeMonitor(layers=layers, num_rows=num_rows))
    lm = transformers.GPTNeoXForCausalLM.from_pretrained(folder, local_files_only=True)
    loader = DataLoader([{k: v[i] for k, v in rows.items()} for i in range(N_SEQ)], batch_size=32)
    trainer = Trainer(accelerator="cpu", logger=False, callbacks=callbacks, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.validate(HFModule(lm), dataloaders=loader, verbose=False)
    return {tag.removeprefix("rankme/"): value for cb in callbacks for tag, value in cb.values_at(0).items()}


def rel_diff(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


class SaveAtEveryValidation(Callback):
    """Save ``step=<N>.ckpt`` after each validation (weights only, as validated) and a full ``last.ckpt`` at
    the end (with the callbacks' states, as train.py's)."""

    def __init__(self, dirpath: Path) -> None:
        self.dirpath = dirpath

    def on_validation_end(self, trainer: Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            trainer.save_checkpoint(self.dirpath / f"step={trainer.global_step}.ckpt", weights_only=True)

    def on_train_end(self, trainer: Trainer, pl_module: pl.LightningModule) -> None:
        trainer.save_checkpoint(self.dirpath / "last.ckpt", weights_only=False)


@dataclass
class TrainedRun:
    """A finished run: its folder (``capgeo_summary.json``, ``checkpoints/``) and its live callbacks."""

    run_dir: Path
    checkpoints: Path
    rankme: RankMeMonitor
    probes: LinearProbeMonitor
    detector: PrecursorDetector


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """A real fit with RankMeMonitor, LinearProbeMonitor and PrecursorDetector, as train.py runs them."""
    models, tasks = pytest.importorskip("models"), pytest.importorskip("tasks")
    run_dir = tmp_path_factory.mktemp("run")
    seed_everything(0, verbose=False)
    datamodule = tasks.make_datamodule(TASK, DIFFICULTY, **DM_KWARGS)
    module = models.CapabilityModule(size="xs", vocab_size=datamodule.vocab_size, max_seq_len=datamodule.seq_len,
                                     lr=3e-3, warmup_steps=4, max_steps=MAX_STEPS)
    chance = pytest.importorskip("tasks.chance").chance_level(datamodule)
    run_info = {"task": TASK, "difficulty": DIFFICULTY, "size": "xs", "seed": 0,
                "parameters": module.model.num_parameters(), "max_steps": MAX_STEPS, "lr": 3e-3, "warmup_steps": 4,
                "chance": chance.to_dict(), "task_params": datamodule.params, "datamodule_factory": FACTORY,
                "datamodule": {"seed": datamodule.seed, "batch_size": datamodule.batch_size,
                               "val_size": datamodule.val_size, "test_size": datamodule.test_size,
                               "eval_batch_size": datamodule.eval_batch_size}}
    rankme_cb = RankMeMonitor(layers=LAYERS, selector="answer", num_rows=NUM_ROWS)
    probe_cb = LinearProbeMonitor(layers=LAYERS, num_rows=NUM_ROWS, every_n_evals=PROBE_EVERY)
    rules = [RankMeRecoveryRule(SETTINGS), *(make_rule(name) for name in COMPARED_RULES)]
    detector = PrecursorDetector(monitor="val/acc", settings=SETTINGS, run_info=run_info, rules=rules,
                                 overhead_budget=None)  # every probe point, for the offline comparison
    checkpoints = run_dir / "checkpoints"
    trainer = Trainer(max_steps=MAX_STEPS, val_check_interval=EVERY, check_val_every_n_epoch=None,
                      num_sanity_val_steps=0, accelerator="cpu", logger=False, default_root_dir=run_dir,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[rankme_cb, probe_cb, detector, SaveAtEveryValidation(checkpoints)],
                      deterministic=True)
    trainer.fit(module, datamodule=datamodule)
    return TrainedRun(run_dir, checkpoints, rankme_cb, probe_cb, detector)


@pytest.fixture(scope="session")
def offline_run(trained_run: TrainedRun, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The offline analysis of a copy of the run folder without its live summary, told nothing: what it measures
    and how, the rules and the run's facts all come from the checkpoints."""
    copy = tmp_path_factory.mktemp("offline") / "run"
    shutil.copytree(trained_run.run_dir, copy)
    (copy / SUMMARY_FILENAME).unlink()
    return analyze(copy)
