r"""Evaluation schedule
===================

Validate at chosen training steps, from step 0 (the initialised model) on, instead of at a fixed interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from capgeo_callbacks.callbacks.base import GradientMeasureCallback
from capgeo_callbacks.run.failures import check_positive_int
from capgeo_callbacks.run.schedule import SCHEDULES, evaluation_steps


class EvaluationSchedule(Callback):
    r"""Run Lightning's validation loop exactly at the given training steps, step 0 included.

    Lightning validates at a fixed interval; the study's collapse happens in the first few hundred steps,
    so capgeo evaluates densely early (:func:`~capgeo_callbacks.run.schedule.evaluation_steps`). This callback
    replaces the fit loop's "validate now?" decision with "is the step just taken in the schedule?" (after
    a whole optimizer step, so gradient accumulation is respected), and runs one validation before the
    first training step if 0 is scheduled. Everything else is Lightning's own validation: its hooks, its
    logging, and its restart logic, so a run resumed from a checkpoint saved after a validation evaluates
    at the same steps as an unbroken one. Before the step-0 validation, the gradient-based monitors cache
    the first training batch, so step 0 reaches every measure.

    **Cost.** About ``points`` validation passes whatever the run's length, where Lightning's default makes one at
    the end of each epoch (none on an endless stream): :func:`~capgeo_callbacks.run.schedule.validation_passes`
    counts them. They are the run's own time, apart from capgeo's measuring cost (docs/overhead.md).

    Args:
        steps: the steps to validate at; default :func:`~capgeo_callbacks.run.schedule.evaluation_steps` of
            ``max_steps`` with ``points`` and ``schedule``.
        max_steps: the budget the schedule spans (default: the trainer's ``max_steps``, else, under ``max_epochs``,
            its ``estimated_stepping_batches``; a run stopped early with a smaller ``max_steps`` still follows the
            whole budget's schedule when this is given).
        points: evaluations over the budget (about; see ``evaluation_steps``).
        schedule: ``"geometric"`` or ``"linear"``.

    Raises:
        ValueError: on a bad argument, or in ``setup`` if neither ``steps``, ``max_steps`` nor the trainer
            (``max_steps``, or ``max_epochs`` over a training set of known length) gives a budget.
        RuntimeError: in ``setup``, on a Lightning version whose fit loop has no validation decision to replace.

    Example::

        trainer = Trainer(max_epochs=20, callbacks=[RankMeMonitor(), PrecursorDetector(), EvaluationSchedule()])
    """

    def __init__(self, steps: Sequence[int] | None = None, *, max_steps: int | None = None, points: int = 256,
                 schedule: str = "geometric") -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown evaluation schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")
        check_positive_int("points", points)
        if max_steps is not None:
            check_positive_int("max_steps", max_steps)
        if steps is not None:
            if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps):
                raise ValueError(f"steps must be non-negative integers, got {list(steps)!r}")
            steps = sorted(set(steps))
        self.steps: list[int] | None = steps
        self.max_steps = max_steps
        self.points = points
        self.schedule = schedule
        self._scheduled: frozenset[int] = frozenset(steps or ())

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if self.steps is None:
            budget = self.max_steps if self.max_steps is not None else step_budget(trainer)
            if budget is None or budget < 1:
                raise ValueError("EvaluationSchedule needs a budget: pass steps=[...] or max_steps=N, or give the "
                                 "Trainer max_steps, or max_epochs with a training set of known length")
            self.steps = evaluation_steps(budget, self.points, self.schedule)
            self._scheduled = frozenset(self.steps)
        loop = trainer.fit_loop.epoch_loop
        if not hasattr(loop, "_should_check_val_fx") or not hasattr(loop, "_should_accumulate"):
            raise RuntimeError("EvaluationSchedule: this Lightning version's training loop has no "
                               "_should_check_val_fx to replace; use val_check_interval instead")
        if getattr(loop, "_capgeo_schedule", None) is not self:
            loop._capgeo_schedule = self
            loop._should_check_val_fx = self._make_decision(trainer, loop)

    def _make_decision(self, trainer: pl.Trainer, loop: Any) -> Any:
        def should_validate(data_fetcher: Any) -> bool:
            if not loop._should_check_val_epoch() or loop._should_accumulate():
                return False
            return trainer.global_step in self._scheduled

        return should_validate

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if trainer.global_step != 0 or 0 not in self._scheduled or batch_idx != 0 or trainer.sanity_checking:
            return
        loop = trainer.fit_loop.epoch_loop
        if not trainer.enable_validation:
            return
        for callback in trainer.callbacks:
            if isinstance(callback, GradientMeasureCallback):
                callback.cache(batch, key=(0, 0))
        trainer.validating = True
        first_iteration = trainer._logger_connector._first_loop_iter
        loop.val_loop.run()
        trainer.training = True
        trainer._logger_connector._first_loop_iter = first_iteration

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"steps": list(self.steps or [])}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get("steps")
        if saved and self.steps is None:
            self.steps = [int(s) for s in saved]
            self._scheduled = frozenset(self.steps)


def step_budget(trainer: pl.Trainer) -> int | None:
    """The optimizer steps the trainer will take: its ``max_steps``, else its estimate under ``max_epochs`` (None
    where it has none: an endless run, or a training set of unknown length without ``max_steps``)."""
    if trainer.max_steps is not None and trainer.max_steps > 0:
        return trainer.max_steps
    estimated = trainer.estimated_stepping_batches  # loads the training set where it is not loaded yet
    if not isinstance(estimated, (int, float)) or not math.isfinite(estimated) or estimated < 1:
        return None
    return int(estimated)
