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

from capgeo_callbacks.engine.gradient import GradientMeasure
from capgeo_callbacks.engine.joined import joined
from capgeo_callbacks.integrations.compat import schedules_validation, validate_after_this_batch, validate_now
from capgeo_callbacks.run.schedule import Schedule


class EvaluationSchedule(Callback):
    r"""Run Lightning's validation loop exactly at the given training steps, step 0 included.

    Lightning validates at a fixed interval; the study's collapse happens in the first few hundred steps,
    so capgeo evaluates densely early (:func:`~capgeo_callbacks.run.schedule.evaluation_steps`). After each
    training batch this callback answers the fit loop's "validate now?" with "is the step just taken in the
    schedule?" (after a whole optimizer step, so gradient accumulation is respected; through the trainer's
    ``val_check_batch``, :mod:`~capgeo_callbacks.integrations.compat`), and runs one validation before the
    first training step if 0 is scheduled. Everything else is Lightning's own validation: its hooks, its
    logging, one more validation where a stop is asked for mid-epoch, and its restart logic, so a run resumed
    from a checkpoint saved after a validation evaluates at the same steps as an unbroken one. Before the
    step-0 validation, the gradient-based monitors cache the first training batch, so step 0 reaches every
    measure.

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
        RuntimeError: in ``setup``, where the trainer validates by time (``val_check_interval="00:00:10:00"``).

    Example::

        trainer = Trainer(max_epochs=20, callbacks=[RankMeMonitor(), PrecursorDetector(), EvaluationSchedule()])
    """

    def __init__(self, steps: Sequence[int] | None = None, *, max_steps: int | None = None, points: int = 256,
                 schedule: str = "geometric") -> None:
        self.plan = Schedule(steps, max_steps=max_steps, points=points, schedule=schedule)
        self._step_before = -1  # the global step when the current training batch started

    steps = property(lambda self: self.plan.steps, doc="The steps to validate at (known at setup if not given).")
    max_steps = property(lambda self: self.plan.max_steps, doc="The budget the schedule spans.")
    points = property(lambda self: self.plan.points)
    schedule = property(lambda self: self.plan.schedule)

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        budget = step_budget(trainer) if self.plan.budget is None else None  # loads the training set: only if needed
        self.plan.fix(budget, "pass steps=[...] or max_steps=N to EvaluationSchedule, or give the Trainer max_steps, "
                      "or max_epochs with a training set of known length")
        if not schedules_validation(trainer):
            raise RuntimeError("EvaluationSchedule decides when Lightning validates by the training batch: give the "
                               "Trainer a val_check_interval in batches (int or float), not a time")

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # a run resumed mid-epoch asks first whether the step it stopped at was validated
        validate_after_this_batch(trainer, trainer.global_step in self.plan)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        validate_after_this_batch(trainer, trainer.global_step in self.plan)  # reloaded loaders reset it

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._step_before = trainer.global_step
        if trainer.global_step != 0 or 0 not in self.plan or batch_idx != 0 or trainer.sanity_checking:
            return
        if not trainer.enable_validation:
            return
        for measure in joined(trainer).measures:  # the gradient measures' fixed batch, before step 0's measurement
            if isinstance(measure, GradientMeasure):
                measure.cache(batch, key=(0, 0))
        validate_now(trainer)

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        # after a whole optimizer step only, so that gradient accumulation is respected
        stepped = trainer.global_step != self._step_before
        validate_after_this_batch(trainer, stepped and trainer.global_step in self.plan)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"steps": list(self.plan.steps or [])}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get("steps")
        if saved and self.plan.steps is None:
            self.plan.use(saved)


def step_budget(trainer: pl.Trainer) -> int | None:
    """The optimizer steps the trainer will take: its ``max_steps``, else its estimate under ``max_epochs`` (None
    where it has none: an endless run, or a training set of unknown length without ``max_steps``)."""
    if trainer.max_steps is not None and trainer.max_steps > 0:
        return trainer.max_steps
    estimated = trainer.estimated_stepping_batches  # loads the training set where it is not loaded yet
    if not isinstance(estimated, (int, float)) or not math.isfinite(estimated) or estimated < 1:
        return None
    return int(estimated)
