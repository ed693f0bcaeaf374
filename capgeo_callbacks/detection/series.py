"""Plain series: checking evaluation steps and values, aligning measured points, smoothing.

A measured series is a list of ``[step, value]`` points (what callbacks record and summaries store);
detection works on aligned sequences: the evaluation steps and one value per step (NaN where a measure
was not taken).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

import numpy as np

Points = Sequence[Sequence[float]]
"""A measured series: ``[[step, value], ...]`` in increasing step order."""


def check_steps(steps: Sequence[Any]) -> list[int]:
    """The steps as ints; raises unless they are integers, strictly increasing."""
    step_list = [s if type(s) is int else as_step(s) for s in steps]  # a plain int needs no conversion
    if any(later <= earlier for earlier, later in pairwise(step_list)):  # rules ask at every evaluation: kept cheap
        i = next(i for i in range(1, len(step_list)) if step_list[i] <= step_list[i - 1])
        raise ValueError(f"steps must be strictly increasing; got {step_list[i]} after "
                         f"{step_list[i - 1]} (position {i})")
    return step_list


def as_step(step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        if isinstance(step, (float, np.floating)) and float(step).is_integer():
            return int(step)
        raise ValueError(f"a step must be an integer, got {step!r}")
    return int(step)


def as_float(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}") from None


def as_floats(name: str, values: Sequence[Any], length: int) -> list[float]:
    out = [as_float(name, v) for v in values]
    if len(out) != length:
        raise ValueError(f"{name} has {len(out)} values but there are {length} steps")
    return out


def align(points: Points, steps: Sequence[int]) -> list[float]:
    """The value of ``points`` at each of ``steps`` (NaN where the series has no point there)."""
    at = {int(p[0]): float(p[1]) for p in points}
    return [at.get(int(step), math.nan) for step in steps]


def append_point(points: list[list[float]], step: int, value: float) -> None:
    """Append (step, value), first dropping points at or after ``step`` (a resumed run evaluating again)."""
    if points and points[-1][0] >= step:
        points[:] = [p for p in points if p[0] < step]
    points.append([step, value])


def split_points(points: Points) -> tuple[list[int], list[float]]:
    """``[[step, value], ...]`` -> (steps, values)."""
    return [int(p[0]) for p in points], [float(p[1]) for p in points]


def aligned_layers(series: Mapping[str, Points], steps: Sequence[int]) -> dict[str, list[float]]:
    """Each series aligned to ``steps``, in the mapping's order."""
    return {name: align(points, steps) for name, points in series.items()}


def moving_average(values: np.ndarray, width: int) -> np.ndarray:
    """Centred moving average of ``width`` (odd) points; the window shrinks at the edges."""
    if width == 1:
        return values.copy()
    half = width // 2
    n = values.size
    cumulative = np.concatenate(([0.0], np.cumsum(values)))
    i = np.arange(n)
    lo = np.maximum(i - half, 0)
    hi = np.minimum(i + half + 1, n)
    return (cumulative[hi] - cumulative[lo]) / (hi - lo)
