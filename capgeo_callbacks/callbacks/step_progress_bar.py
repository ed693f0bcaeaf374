r"""Step progress bar
=================

A progress bar that counts optimizer steps out of the budget and shows what capgeo watches.

Lightning's bar counts batches of an epoch; a run over an endless stream of batches has no epochs to count,
so it shows ``Epoch 0/-2`` and an unknown total. :class:`StepProgressBar` shows ``step k/max_steps`` and,
beside the logged progress-bar metrics, the latest monitored accuracy, the deepest watched layer's RankMe and the
forecast of the acquisition step made at the latest evaluation, with its interval, or the acquisition step once it
is confirmed: all read from the view of the run the :class:`~capgeo_callbacks.PrecursorDetector`'s session keeps
(:class:`~capgeo_callbacks.run.view.SessionView`), if there is a detector; and, under an overhead budget, capgeo's
measured share of the run's time against it (``capgeo 2.1%/3%``).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import TQDMProgressBar
from typing_extensions import override

from capgeo_callbacks.callbacks.precursor_detector import PrecursorDetector

__all__ = ["BarSafeHandler", "StepProgressBar"]


class BarSafeHandler(logging.StreamHandler):
    """A logging handler that writes above an open progress bar (``tqdm.write``) instead of onto its line."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # noqa: BLE001 - logging's own contract: a handler reports, never raises
            self.handleError(record)


class StepProgressBar(TQDMProgressBar):
    """:class:`~lightning.pytorch.callbacks.TQDMProgressBar` over optimizer steps (module docstring).

    Example::

        Trainer(max_steps=3000, callbacks=[StepProgressBar(), RankMeMonitor(), PrecursorDetector()])
    """

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        if self._leave:
            self.train_progress_bar = self.init_train_tqdm()
        bar = self.train_progress_bar
        bar.set_description("step", refresh=False)
        bar.reset(total=trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None)
        bar.n = trainer.global_step  # a resumed run starts where it stopped

    # validations (about 256 a run) update the step bar's figures instead of drawing bars of their own
    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn != "fit":
            super().on_validation_start(trainer, pl_module)

    @override
    def on_validation_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                                  batch_idx: int, dataloader_idx: int = 0) -> None:
        if trainer.state.fn != "fit":
            super().on_validation_batch_start(trainer, pl_module, batch, batch_idx, dataloader_idx)

    @override
    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        if trainer.state.fn != "fit":
            super().on_validation_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn != "fit":
            super().on_validation_end(trainer, pl_module)
        elif self._train_progress_bar is not None:
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        bar = self.train_progress_bar
        if bar is None or not self._should_update(trainer.global_step, bar.total):
            return
        bar.n = trainer.global_step
        bar.refresh()
        bar.set_postfix(self.get_metrics(trainer, pl_module))

    @override
    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, int | str | float]:
        metrics = {key: value for key, value in super().get_metrics(trainer, pl_module).items() if key != "v_num"}
        detector = next((cb for cb in trainer.callbacks if isinstance(cb, PrecursorDetector)), None)
        if detector is None:
            return metrics
        view = detector.view
        if view.steps:
            metrics[view.keys.monitor] = f"{view.acc:.3f}"
        rankme = [(layer, value) for layer, value in view.layers().items() if math.isfinite(value)]
        if rankme:
            deepest, value = rankme[-1]
            metrics[f"rankme {deepest}"] = f"{value:.1f}"
        budget = detector.session.budget
        share = None if budget is None else budget.measured_share
        if share is not None:
            metrics["capgeo"] = f"{100 * share:.1f}%/{100 * budget.share:g}%"
        if view.acquired_step is not None:
            metrics["acquired"] = f"step {view.acquired_step}"
        elif view.forecasts:  # made at the latest evaluation: an older one may no longer stand
            latest = list(view.forecasts.values())[-1]
            interval = ("" if latest.low is None or latest.high is None else
                        f" [{latest.low:.0f}, {'inf' if math.isinf(latest.high) else f'{latest.high:.0f}'}]")
            metrics[f"forecast ({latest.rule})"] = ("beyond reach" if math.isinf(latest.predicted)
                                                   else f"step {latest.predicted:.0f}{interval}")
        return metrics
