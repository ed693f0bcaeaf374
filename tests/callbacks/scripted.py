"""A scripted run: a measure callback whose RankMe collapses and recovers before a scripted accuracy crosses
the acquisition threshold, so the PrecursorDetector's alerts, verdict and gap are known in advance."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn

from capgeo_callbacks import MeasureCallback

INTERVAL = 10
# RankMe per evaluation (evaluation i is at step 10 * (i + 1)): rise, collapse at eval 5, recover.
RANKME = [20, 30, 40, 30, 15, 8, 9, 14, 20, 26, 30, 32, 33, 33, 33, 33]
# accuracy crosses 0.5 at eval 11 (step 120) and stays there
ACC = [0.0] * 11 + [0.6, 0.7, 0.8, 0.9, 0.95]


class ScriptedMeasure(MeasureCallback):
    """A measure whose values follow a script (the detector reads it like any measure callback)."""

    tags = ["rankme/last"]

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        probe = 0.1 if self.evaluations < 6 else 0.8  # the answer becomes linearly readable at step 70
        self.record(trainer, trainer.global_step,
                    {"rankme/last": float(RANKME[self.evaluations]), "probe_acc/last": probe})
        self.evaluations += 1


class ScriptedAccuracy(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(2, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        evaluation = self.global_step // INTERVAL - 1
        self.log("val/acc", ACC[evaluation], on_epoch=True, batch_size=1)
        self.log("val/logprob", -3.0 + 0.25 * evaluation, on_epoch=True, batch_size=1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)
