"""What the PrecursorDetector records at every evaluation: every val/ scalar, the mean training loss since the
previous evaluation, and the learning rate, with a real Trainer and a module whose losses are known."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch import Trainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from capgeo_callbacks import PrecursorDetector

INTERVAL = 5


class KnownLosses(pl.LightningModule):
    """Training loss at step k is exactly k (plus a zero that carries the gradient); lr halves every step."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(1, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).sum() * 0 + float(self.global_step)

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.log("val/acc", 0.1 * self.global_step / INTERVAL, batch_size=1)
        self.log("val/token_acc", 0.5, batch_size=1)
        self.log("other/ignored", 1.0, batch_size=1)

    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.5), "interval": "step"}}


def fit(root: Path, max_steps: int, detector: PrecursorDetector, ckpt_path: str | None = None) -> Trainer:
    trainer = Trainer(max_steps=max_steps, val_check_interval=INTERVAL, check_val_every_n_epoch=None,
                      accelerator="cpu", logger=False, callbacks=[detector], enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=str(root),
                      enable_checkpointing=False)
    data = TensorDataset(torch.ones(100, 1))
    trainer.fit(KnownLosses(), DataLoader(data, batch_size=1), DataLoader(data[:1][0], batch_size=1),
                ckpt_path=ckpt_path)
    return trainer


def test_every_val_scalar_the_loss_since_the_last_evaluation_and_the_lr(tmp_path: Path) -> None:
    detector = PrecursorDetector(logprob_monitor=None, live_figures=False)
    fit(tmp_path, 15, detector)
    assert detector.acc == [[5, pytest.approx(0.1)], [10, pytest.approx(0.2)], [15, pytest.approx(0.3)]]
    assert set(detector.scalars) == {"val/token_acc", "train/loss", "lr"}  # not the monitor, not other/
    assert detector.scalars["val/token_acc"] == [[5, 0.5], [10, 0.5], [15, 0.5]]
    # steps 0-4 have losses 0..4 (mean 2), steps 5-9 mean 7, steps 10-14 mean 12
    assert detector.scalars["train/loss"] == [[5, 2.0], [10, 7.0], [15, 12.0]]
    assert detector.scalars["lr"] == [[5, 0.5 ** 5], [10, 0.5 ** 10], [15, 0.5 ** 15]]
    summary = detector.summary
    assert summary["series"]["train/loss"] == [[5, 2.0], [10, 7.0], [15, 12.0]]
    assert summary["labels"]["max_acc"] == pytest.approx(0.3)


def test_a_resumed_run_records_the_same_series(tmp_path: Path) -> None:
    whole = PrecursorDetector(logprob_monitor=None, live_figures=False)
    fit(tmp_path / "whole", 15, whole)
    first = PrecursorDetector(logprob_monitor=None, live_figures=False)
    trainer = fit(tmp_path / "first", 7, first)  # stops mid-interval: losses of steps 5 and 6 pending
    trainer.save_checkpoint(tmp_path / "mid.ckpt")
    second = PrecursorDetector(logprob_monitor=None, live_figures=False)
    fit(tmp_path / "second", 15, second, ckpt_path=str(tmp_path / "mid.ckpt"))
    assert second.scalars == whole.scalars and second.acc == whole.acc
