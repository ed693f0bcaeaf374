"""Evaluation schedules: the training steps at which a run is evaluated (and measured).

The default, ``geometric``, evaluates the initialised model (step 0), spaces about a quarter of the points
geometrically over the first tenth of the budget, where the study's collapse happens, and the rest evenly
after it, as Pythia spaced its early checkpoints; ``linear`` spaces them evenly. Both are pure functions of
the budget, so a resumed run evaluates at the same steps as an unbroken one. docs/design.md, "When to
measure".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from capgeo_callbacks.run.failures import check_positive_int

SCHEDULES = ("geometric", "linear")
EARLY_SHARE = 0.25  # share of the points in the early, geometric part
EARLY_SPAN = 0.10  # share of the budget the early part covers


def linear_interval(max_steps: int, points: int = 256) -> int:
    """Steps between evaluations of the ``linear`` schedule: ``ceil(max_steps / (points - 1))``, at least 1."""
    return max(1, math.ceil(max_steps / max(1, points - 1)))


def evaluation_steps(max_steps: int, points: int = 256, schedule: str = "geometric") -> list[int]:
    """The sorted, distinct steps (0 to ``max_steps``) at which a run of ``max_steps`` steps is evaluated.

    ``points`` counts step 0; duplicates after rounding are merged, so a short budget gets fewer points.

    Raises:
        ValueError: on an unknown schedule or a non-positive budget or point count.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown evaluation schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")
    for name, value in (("max_steps", max_steps), ("points", points)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if schedule == "linear":
        interval = linear_interval(max_steps, points)
        return [0, *range(interval, max_steps + 1, interval)]
    early_end = max(1, round(EARLY_SPAN * max_steps))
    early_points = max(1, round(EARLY_SHARE * points))
    early = np.unique(np.round(np.geomspace(1, early_end, early_points)).astype(int))
    late_points = max(1, points - 1 - early.size)
    late = np.unique(np.round(np.linspace(early_end, max_steps, late_points + 1)[1:]).astype(int))
    return sorted({0, *early.tolist(), *late.tolist()})


def validation_passes(max_steps: int, points: int = 256, schedule: str = "geometric",
                      steps_per_epoch: int | None = None) -> tuple[int, int]:
    """The validation passes a run of ``max_steps`` makes under the evaluation schedule, and those it makes under
    Lightning's default (one at the end of each whole epoch of ``steps_per_epoch`` steps; None: an endless stream,
    whose epoch never ends, none): what ``EvaluationSchedule`` adds is the difference, counted without timing anything.

    Raises:
        ValueError: on a bad argument.
    """
    scheduled = len(evaluation_steps(max_steps, points, schedule))
    if steps_per_epoch is None:
        return scheduled, 0
    if isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int) or steps_per_epoch < 1:
        raise ValueError(f"steps_per_epoch must be a positive integer or None, got {steps_per_epoch!r}")
    return scheduled, max_steps // steps_per_epoch


class Schedule:
    """The steps a run is evaluated at, whatever trains it: the ones given, or :func:`evaluation_steps` of its budget,
    known once the budget is (:meth:`fix`). Checked here once, for the Lightning and the Hugging Face adapters.

    Args:
        steps: the steps to evaluate at (default: the schedule over the budget).
        max_steps: the budget the schedule spans (default: the trainer's, given to :meth:`fix`).
        points: evaluations over the budget (about; see :func:`evaluation_steps`).
        schedule: ``"geometric"`` or ``"linear"``.
        name: the argument ``steps`` is given as, for the messages.

    Raises:
        ValueError: on a bad argument.
    """

    def __init__(self, steps: Sequence[int] | None = None, *, max_steps: int | None = None, points: int = 256,
                 schedule: str = "geometric", name: str = "steps") -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown evaluation schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")
        check_positive_int("points", points)
        if max_steps is not None:
            check_positive_int("max_steps", max_steps)
        if steps is not None and (not list(steps) or not all(
                isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps)):
            raise ValueError(f"{name} must be non-negative integers, got {steps!r}")
        self.points, self.schedule, self.max_steps = points, schedule, max_steps
        self.steps: list[int] | None = None
        self._scheduled: frozenset[int] = frozenset()
        if steps is not None:
            self.use(steps)

    def use(self, steps: Sequence[int]) -> None:
        """Evaluate at ``steps`` (a resumed run's, as its checkpoint kept them)."""
        self.steps = sorted({int(step) for step in steps})
        self._scheduled = frozenset(self.steps)

    @property
    def budget(self) -> int | None:
        """The steps the schedule spans: ``max_steps``, else the last step given (None: not known yet)."""
        return self.max_steps if self.max_steps is not None else (self.steps[-1] if self.steps else None)

    def fix(self, budget: int | None, how: str) -> list[int]:
        """The steps, the schedule over ``budget`` (the trainer's, where ``max_steps`` was not given) if none were
        given.

        Raises:
            ValueError: where no budget is known (``how`` says how to give one).
        """
        if self.steps is None:
            budget = self.max_steps if self.max_steps is not None else budget
            if budget is None or budget < 1:
                raise ValueError(f"the evaluation schedule needs a budget: {how}")
            self.max_steps = budget
            self.use(evaluation_steps(budget, self.points, self.schedule))
        return list(self.steps or [])

    def __contains__(self, step: object) -> bool:
        return step in self._scheduled
