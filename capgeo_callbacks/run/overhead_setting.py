"""The ``overhead_budget`` setting: its values and the one place they are checked (docs/overhead.md). The controller
that holds a run to it is :class:`capgeo_callbacks.run.budget.OverheadBudget`."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["DEFAULT_OVERHEAD_BUDGET", "MEASURE", "OFF", "OverheadSetting", "check_overhead_budget",
           "overhead_budget_arg", "steps_of"]

DEFAULT_OVERHEAD_BUDGET = 0.03  # capgeo's time at most 3% of the run's (docs/overhead.md)
MEASURE, OFF = "measure", "off"  # the settings that are not a share: time everything and thin nothing; no budget
OverheadSetting = float | str | None  # the setting: a share of the run's time, MEASURE, or None / 0 / OFF


def check_overhead_budget(value: Any) -> OverheadSetting:
    """The ``overhead_budget`` setting, checked: a share of the run's time in (0, 1), ``"measure"`` (time everything,
    thin nothing), or None, 0 or ``"off"`` (no budget: nothing timed). The one place it is validated.

    Raises:
        ValueError: on anything else (the message names the setting and its valid values).
    """
    if value is None or value == OFF:
        return None
    if value == MEASURE:
        return MEASURE
    if not isinstance(value, (bool, str)) and isinstance(value, (int, float)) and math.isfinite(value) \
            and 0 <= value < 1:
        return float(value) or None
    raise ValueError(f"overhead_budget must be a share of the run's time in (0, 1) (e.g. 0.03: capgeo's own work at "
                     f"most 3% of the run's, thinned to fit), {MEASURE!r} (time everything, thin nothing), or None, 0 "
                     f"or {OFF!r} (no budget, nothing timed); got {value!r}")


def overhead_budget_arg(text: str) -> OverheadSetting:
    """``--overhead-budget`` as a command line gives it (``0.03``, ``measure``, ``off``), checked by
    :func:`check_overhead_budget`."""
    try:
        value: Any = float(text)
    except ValueError:
        value = text.strip().lower()
    return check_overhead_budget(value)


def steps_of(*candidates: Any) -> int | None:
    """The first of ``candidates`` that is a finite positive number of steps (a callable is called only if reached),
    as an integer: a run's horizon from what its framework knows (None: no candidate is)."""
    for candidate in candidates:
        steps = candidate() if callable(candidate) else candidate
        if isinstance(steps, (int, float)) and not isinstance(steps, bool) and 0 < steps < math.inf:
            return int(steps)
    return None
