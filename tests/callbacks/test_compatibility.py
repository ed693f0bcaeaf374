"""The compatibility matrix: every capgeo callback attached to a model capgeo has never seen (Lightning's own
demo Transformer), under every Lightning logger and the Trainer features users combine them with. Each row
must train to its end without an exception; where a logger's content is checked, it is read back by its own
reader. (What each logger receives in detail: tests/publish/test_loggers.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.demos import Transformer
from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger, WandbLogger
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from capgeo_callbacks import (
    SUMMARY_FILENAME,
    EvaluationSchedule,
    GradientRankMonitor,
    HessianMonitor,
    LinearProbeMonitor,
    LLCMonitor,
    MeasureCallback,
    PrecursorDetector,
    RankMeMonitor,
)
from capgeo_callbacks.callbacks import never_fails

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["model.transformer.encoder.layers.*"]
VOCAB, SEQ = 32, 8


class DemoLM(pl.LightningModule):
    """Lightning's demo Transformer (encoder-decoder, tiny) on (input, target) token batches."""

    def __init__(self) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=VOCAB, ninp=16, nhead=2, nhid=16, nlayers=1, dropout=0.1)

    def forward(self, inputs: Tensor, target: Tensor) -> Tensor:
        return self.model(inputs, target)

    def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        loss = nll(self(*batch), batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: list[Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        right = self(*batch).argmax(-1) == batch[1].reshape(-1)
        name = "val_acc" if dataloader_idx == 0 else f"val_acc_{dataloader_idx}"
        self.log(name, right.float().mean(), batch_size=batch[0].shape[0], add_dataloader_idx=False)

    def test_step(self, batch: list[Tensor], batch_idx: int) -> None:
        self.log("test_acc", (self(*batch).argmax(-1) == batch[1].reshape(-1)).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def nll(output: Tensor, batch: list[Tensor]) -> Tensor:
    return F.nll_loss(output, batch[1].reshape(-1))


def tokens(n: int, seed: int) -> TensorDataset:
    x = torch.randint(0, VOCAB, (n, SEQ + 1), generator=torch.Generator().manual_seed(seed))
    return TensorDataset(x[:, :-1], x[:, 1:])


def every_callback(schedule: bool = False) -> list[pl.Callback]:
    """One of each capgeo callback, at settings small enough for a matrix of runs."""
    forward = lambda module, batch: module(batch[0], batch[1])  # noqa: E731
    callbacks: list[pl.Callback] = [
        RankMeMonitor(layers=LAYERS, selector="mean", num_rows=64),
        LinearProbeMonitor(layers=LAYERS, selector="mean", num_rows=64, labels_fn=lambda batch: batch[1][:, 0]),
        GradientRankMonitor(loss_fn=nll, forward=forward, batch_size=8),
        HessianMonitor(loss_fn=nll, forward=forward, batch_size=8, k=1, num_iterations=4, every_n_evals=2),
        LLCMonitor(loss_fn=nll, forward=forward, batch_size=8, num_batches=1, num_chains=1, num_draws=3,
                   every_n_evals=2),
        PrecursorDetector(monitor="val_acc", logprob_monitor=None, overhead_budget=None),  # every cadence whole
    ]
    if schedule:
        callbacks.append(EvaluationSchedule(points=5))
    return callbacks


def loggers(kind: str, root: Path) -> list[Logger] | bool:
    made: dict[str, Callable[[], Logger]] = {
        "tensorboard": lambda: TensorBoardLogger(root, name="tb"),
        "csv": lambda: CSVLogger(root, name="csv"),
        "wandb": lambda: WandbLogger(project="capgeo-tests", save_dir=str(root), offline=True),
        "mlflow": lambda: MLFlowLogger(experiment_name="capgeo-tests", tracking_uri=f"file:{root / 'mlruns'}"),
    }
    if kind == "none":
        return False
    if kind == "several":
        return [made[name]() for name in ("tensorboard", "csv", "wandb", "mlflow")]
    return [made[kind]()]


pytestmark = [
    pytest.mark.usefixtures("offline_loggers"),
    # the costly measures at the cheapest settings, on an untrained model: the warnings those settings call for
    # (raise num_iterations; an LLC off a minimum) are the expected output, not a compatibility problem
    pytest.mark.filterwarnings("ignore:HessianMonitor.*Lanczos did not reach the residual tolerance:UserWarning"),
    pytest.mark.filterwarnings("ignore:LLCMonitor.*negative LLC estimate:UserWarning"),
]


def make_trainer(root: Path, callbacks: list[pl.Callback], logger: list[Logger] | bool, **options: Any) -> Trainer:
    settings: dict[str, Any] = {"max_steps": 8, "val_check_interval": 4, "num_sanity_val_steps": 0}
    settings.update(options)
    return Trainer(accelerator="cpu", devices=1, logger=logger, callbacks=callbacks, default_root_dir=root,
                   enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False, **settings)


def train_loader() -> DataLoader:
    return DataLoader(tokens(64, 0), batch_size=8)


def val_loader() -> DataLoader:
    return DataLoader(tokens(64, 1), batch_size=32)


def detector_of(trainer: Trainer) -> PrecursorDetector:
    return next(cb for cb in trainer.callbacks if isinstance(cb, PrecursorDetector))


def measured(trainer: Trainer) -> set[str]:
    return {tag for cb in trainer.callbacks if isinstance(cb, MeasureCallback) for tag in cb.series}


LAYER = "model.transformer.encoder.layers.0"  # one watched layer keeps its full name
ALL_TAGS = {f"rankme/{LAYER}", f"probe_acc/{LAYER}", "grad_erank", "grad_cov_rank", "hessian/eig_0", "llc"}


@pytest.mark.parametrize("kind", ["tensorboard", "csv", pytest.param("wandb", marks=pytest.mark.slow), "mlflow", "none",
                                  pytest.param("several", marks=pytest.mark.slow)])  # W&B's offline start is slow
def test_every_logger(kind: str, tmp_path: Path) -> None:
    seed_everything(0, verbose=False)
    trainer = make_trainer(tmp_path, every_callback(), loggers(kind, tmp_path))
    trainer.fit(DemoLM(), train_loader(), val_loader())
    assert trainer.global_step == 8
    assert measured(trainer) >= ALL_TAGS
    assert detector_of(trainer).summary["steps"] == 8
    if kind != "none":  # the summary goes to the first logger's folder
        assert (Path(trainer.log_dir) / SUMMARY_FILENAME).is_file()


def test_csv_logger_regression(tmp_path: Path) -> None:
    """capgeo 0.1 passed ``metrics=`` to every logger's ``log_hyperparams`` at the end of fit: a TypeError with
    CSVLogger after the whole run. Now the hparams reach CSVLogger through its own API."""
    trainer = make_trainer(tmp_path, every_callback(), [TensorBoardLogger(tmp_path, name="tb"),
                                                        CSVLogger(tmp_path, name="csv")])
    with warnings.catch_warnings():
        warnings.simplefilter("error", category=TypeError)
        trainer.fit(DemoLM(), train_loader(), val_loader())
    csv_dir = Path(trainer.loggers[1].log_dir)
    assert "verdict" in (csv_dir / "hparams.yaml").read_text()
    assert "capgeo/final_acc" in (csv_dir / "metrics.csv").read_text().splitlines()[0]


FEATURES: dict[str, dict[str, Any]] = {
    "fast_dev_run": {"fast_dev_run": True},
    "sanity_checking": {"num_sanity_val_steps": 2},
    "bf16_mixed": {"precision": "bf16-mixed"},
    "validation_per_epoch": {"val_check_interval": 1.0, "check_val_every_n_epoch": 1, "max_steps": 16},
    "limit_val_batches": {"limit_val_batches": 0.5},
    "gradient_accumulation": {"accumulate_grad_batches": 2},
}


@pytest.mark.parametrize("feature", list(FEATURES))
def test_trainer_features(feature: str, tmp_path: Path) -> None:
    seed_everything(0, verbose=False)
    options = FEATURES[feature]
    trainer = make_trainer(tmp_path, every_callback(), loggers("several", tmp_path), **options)
    trainer.fit(DemoLM(), train_loader(), val_loader())
    expected = 1 if feature == "fast_dev_run" else options.get("max_steps", 8)
    assert trainer.global_step == expected
    if feature != "fast_dev_run":  # fast_dev_run: one step and one validation batch, a smoke test
        assert {f"rankme/{LAYER}", f"probe_acc/{LAYER}", "grad_erank"} <= measured(trainer)
        assert detector_of(trainer).summary["steps"] == expected
    if feature == "sanity_checking":  # the sanity check is not an evaluation
        assert [p[0] for p in detector_of(trainer).acc] == [4, 8]


def test_two_validation_dataloaders(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, every_callback(), loggers("several", tmp_path))
    trainer.fit(DemoLM(), train_loader(), [val_loader(), DataLoader(tokens(16, 2), batch_size=8)])
    assert trainer.global_step == 8 and measured(trainer) >= ALL_TAGS
    rankme = next(cb for cb in trainer.callbacks if isinstance(cb, RankMeMonitor))
    assert rankme.rows == {f"rankme/{LAYER}": 64}  # rows from the first loader only


def test_validate_and_test_outside_fit(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, every_callback(), loggers("several", tmp_path))
    module = DemoLM()
    trainer.validate(module, val_loader(), verbose=False)  # before any fit: nothing cached for the gradients
    trainer.test(module, val_loader(), verbose=False)
    trainer.fit(module, train_loader(), val_loader())
    trainer.validate(module, val_loader(), verbose=False)
    trainer.test(module, val_loader(), verbose=False)
    assert trainer.global_step == 8 and measured(trainer) >= ALL_TAGS


def test_fit_twice_on_one_trainer(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, every_callback(schedule=True), loggers("several", tmp_path))
    module = DemoLM()
    trainer.fit(module, train_loader(), val_loader())
    trainer.fit(module, train_loader(), val_loader())  # max_steps reached: Lightning returns at once
    assert trainer.global_step == 8 and detector_of(trainer).summary["steps"] == 8


@pytest.mark.parametrize("schedule", [False, True])
def test_resume_with_ckpt_path(schedule: bool, tmp_path: Path) -> None:
    seed_everything(0, verbose=False)
    first = make_trainer(tmp_path / "a", every_callback(schedule), loggers("several", tmp_path / "a"), max_steps=4)
    first.fit(DemoLM(), train_loader(), val_loader())
    first.save_checkpoint(tmp_path / "half.ckpt")
    second = make_trainer(tmp_path / "b", every_callback(schedule), loggers("several", tmp_path / "b"))
    second.fit(DemoLM(), train_loader(), val_loader(), ckpt_path=tmp_path / "half.ckpt")
    assert second.global_step == 8
    steps = [p[0] for p in detector_of(second).acc]
    assert steps == sorted(set(steps)) and steps[-1] == 8  # continued, no duplicate


def test_evaluation_schedule_with_accumulation(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, every_callback(schedule=True), loggers("csv", tmp_path),
                           accumulate_grad_batches=2, val_check_interval=1, check_val_every_n_epoch=None)
    trainer.fit(DemoLM(), train_loader(), val_loader())
    schedule = next(cb for cb in trainer.callbacks if isinstance(cb, EvaluationSchedule))
    assert [p[0] for p in detector_of(trainer).acc] == schedule.steps  # once per scheduled step, step 0 too


class RaisesMidRun(MeasureCallback):
    """A measure whose hook raises at the third evaluation (under the callbacks' failure rule)."""

    @never_fails
    def on_validation_epoch_end(self, trainer: Trainer, pl_module: pl.LightningModule) -> None:
        self.evaluations += 1
        if self.evaluations == 3:
            raise RuntimeError("measure exploded")


def test_a_measure_that_raises_mid_run_is_reported_and_training_goes_on(tmp_path: Path) -> None:
    failing = RaisesMidRun()
    trainer = make_trainer(tmp_path, [*every_callback(), failing], loggers("csv", tmp_path), max_steps=24)
    with pytest.warns(UserWarning, match=r"RaisesMidRun.on_validation_epoch_end failed \(RuntimeError: measure "
                                         r"exploded\); skipped, training goes on"):
        trainer.fit(DemoLM(), train_loader(), val_loader())
    assert trainer.global_step == 24 and failing.evaluations == 6


def test_a_failing_logger_is_reported_and_training_goes_on(tmp_path: Path) -> None:
    class BrokenLogger(CSVLogger):
        def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
            raise OSError("disk full")

    trainer = make_trainer(tmp_path, every_callback(), [BrokenLogger(tmp_path, name="broken")])
    with pytest.warns(UserWarning, match="BrokenLogger failed to take the hparams"):
        trainer.fit(DemoLM(), train_loader(), val_loader())
    assert trainer.global_step == 8 and (Path(trainer.log_dir) / SUMMARY_FILENAME).is_file()


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_ddp_on_cpu(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline",
           "MLFLOW_ALLOW_FILE_STORE": "true"}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("compat_ddp_script.py")), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "ok").read_text() == "8"
