r"""Step progress bar
=================

A progress bar that counts optimizer steps out of the budget and shows what capgeo watches.

Lightning's bar counts batches of an epoch; a run over an endless stream of batches has no epochs to count,
so it shows ``Epoch 0/-2`` and an unknown total, and a run of many short epochs restarts its rate and elapsed time
at each. :class:`StepProgressBar` shows ``step k/max_steps`` (under ``max_epochs``, the trainer's estimated steps)
over the whole run and,
beside the logged progress-bar metrics, the latest monitored accuracy, the deepest watched layer's RankMe and the
forecast of the acquisition step made at the latest evaluation, with its interval, or the acquisition step once it
is confirmed: all read from the view of the run the :class:`~capgeo_callbacks.PrecursorDetector`'s session keeps
(:meth:`~capgeo_callbacks.run.view.SessionView.progress`), if there is a detector; and, under an overhead budget,
capgeo's measured share of the run's time against it (``capgeo 2.1%/3%``; measured only, ``capgeo 2.1%``). Where
its output is not a terminal (a log file), it writes a line per 5% of the budget instead of redrawing one line.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import TQDMProgressBar
from typing_extensions import override

from capgeo_callbacks.callbacks.evaluation_schedule import step_budget
from capgeo_callbacks.engine.joined import joined

__all__ = ["BarSafeHandler", "StepProgressBar"]

LINES = 20  # where the output is not a terminal: a line per 5% of the budget
QUIET_SECONDS = 30.0  # ... or, with no budget known, a line per 30 seconds


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

    _terminal = True  # set at the start of training; a validation before it (the sanity check) redraws as usual
    _started, _line, _line_time = False, -1, 0.0

    @override
    def on_train_start(self, *args: Any) -> None:
        super().on_train_start(*args)
        self._terminal = sys.stdout.isatty()  # Lightning's bars write to stdout
        self._started, self._line, self._line_time = False, -1, time.monotonic()

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        if self._leave:
            self.train_progress_bar = self.init_train_tqdm()
        elif self._started:
            return  # one bar over the whole run: its rate and elapsed time go on across epochs
        self._started = True
        bar = self.train_progress_bar
        bar.set_description("step", refresh=False)
        bar.reset(total=step_budget(trainer))
        bar.n = bar.initial = trainer.global_step  # a resumed run starts where it stopped; its rate, from there

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
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=self._terminal)

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        bar = self.train_progress_bar
        if bar is None or not self._should_update(trainer.global_step, bar.total):
            return
        bar.n = trainer.global_step
        if self._terminal:
            bar.refresh()
            bar.set_postfix(self.get_metrics(trainer, pl_module))
        elif self._line_due(bar.n, bar.total):  # a log file: a line of its own, every 5% of the budget
            bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
            bar.refresh()
            bar.fp.write("\n")

    def _line_due(self, step: int, total: int | float | None) -> bool:
        """Whether a line is due where the output is not a terminal: at each 5% of the budget, or with no budget
        known, every 30 seconds."""
        if total:
            line = int(step * LINES // total)
            due = line > self._line
            self._line = max(self._line, line)
            return due
        due = time.monotonic() - self._line_time >= QUIET_SECONDS
        self._line_time = time.monotonic() if due else self._line_time
        return due

    @override
    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, int | str | float]:
        metrics = {key: value for key, value in super().get_metrics(trainer, pl_module).items() if key != "v_num"}
        engine = joined(trainer).engine  # the detector's, where one joined the Trainer
        if engine is None:
            return metrics
        metrics = {**metrics, **engine.session.view.progress()}
        budget = engine.session.budget
        share = None if budget is None else budget.progress()
        if share is not None:
            metrics["capgeo"] = share
        return metrics
