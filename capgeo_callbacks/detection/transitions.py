"""Each measure's own transition, and whether it came before acquisition (the per-measure precursor rate)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from capgeo_callbacks.detection.events import detect_collapse
from capgeo_callbacks.detection.series import as_floats, check_steps
from capgeo_callbacks.detection.settings import DEFAULT_SETTINGS, TRANSITION_KINDS, DetectionSettings


@dataclass(frozen=True)
class Transition:
    """A measure's own transition and whether it came before acquisition.

    Attributes:
        kind: how the transition is found (see :func:`measure_transition`).
        step: the transition step, or None if the series shows none.
        precedes_acquisition: True if the transition lies more than ``window`` evaluations before the
            acquisition evaluation; False if it does not (or there is no transition); None if the run
            never acquired.
    """

    kind: str
    step: int | None
    precedes_acquisition: bool | None


def measure_transition(
    steps: Sequence[int],
    values: Sequence[float],
    acquisition_step: int | None,
    kind: str = "collapse",
    settings: DetectionSettings = DEFAULT_SETTINGS,
    *,
    reference_steps: Sequence[int] | None = None,
) -> Transition:
    """The transition of any measured series.

    Kinds: ``collapse``, the collapse step of :func:`detect_collapse` (dimension-like measures: RankMe,
    gradient ranks); ``crossing``, the first evaluation at or above ``settings.threshold`` (probe accuracy:
    the answer becomes linearly readable); ``change``, the later point of the largest absolute change
    between consecutive measured points (sharpness, LLC: sparse measures, where smoothing would mix
    points dozens of evaluations apart).

    Evaluations are counted on ``reference_steps``, the run's evaluation steps (a costly measure may be
    taken only every n evaluations), by default on ``steps`` themselves. Only the points up to ``window``
    reference evaluations after acquisition are searched, so a later change does not hide an earlier one,
    whatever the measure's sampling.

    Raises:
        ValueError: on an unknown kind, mismatched lengths or non-increasing steps.
    """
    if kind not in TRANSITION_KINDS:
        raise ValueError(f"unknown transition kind {kind!r}; valid: {', '.join(TRANSITION_KINDS)}")
    step_list = check_steps(steps)
    series = as_floats("values", values, len(step_list))
    reference = check_steps(reference_steps) if reference_steps is not None else step_list
    if acquisition_step is not None and reference:
        acquisition_index = bisect.bisect_left(reference, acquisition_step)
        until = reference[min(acquisition_index + settings.window, len(reference) - 1)]
        kept = [i for i, step in enumerate(step_list) if step <= until]
        step_list, series = [step_list[i] for i in kept], [series[i] for i in kept]
    found: int | None = None
    if kind == "collapse":
        collapse = detect_collapse(step_list, series, settings) if len(step_list) >= 2 else None
        found = None if collapse is None else collapse.step
    elif kind == "crossing":
        found = next((st for st, v in zip(step_list, series, strict=True) if v >= settings.threshold), None)
    else:
        finite = [(st, v) for st, v in zip(step_list, series, strict=True) if math.isfinite(v)]
        if len(finite) >= 2:
            jumps = np.abs(np.diff([v for _, v in finite]))
            if jumps.max() > 0:
                found = finite[int(np.argmax(jumps)) + 1][0]
    if acquisition_step is None:
        return Transition(kind, found, None)
    if found is None:
        return Transition(kind, None, False)
    apart = bisect.bisect_left(reference, acquisition_step) - bisect.bisect_left(reference, found)
    return Transition(kind, found, apart > settings.window)
