"""Evaluation schedules: the training steps at which a run is evaluated (and measured).

The default, ``geometric``, evaluates the initialised model (step 0), spaces about a quarter of the points
geometrically over the first tenth of the budget, where the study's collapse happens, and the rest evenly
after it, as Pythia spaced its early checkpoints; ``linear`` spaces them evenly. Both are pure functions of
the budget, so a resumed run evaluates at the same steps as an unbroken one. docs/design.md, "When to
measure".
"""

from __future__ import annotations

import math

import numpy as np

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
