"""Rank correlations: the layer order of a collapse, and the agreement of two curves."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from capgeo_callbacks.detection.series import as_floats


def layer_order(collapse_steps: Mapping[str, int | None], depths: Mapping[str, int]) -> float | None:
    """Spearman rank correlation of layer depth with collapse step, over the layers that collapsed.

    Negative means top-down: deeper layers collapse first.

    Args:
        collapse_steps: collapse step per layer (None: no collapse, left out).
        depths: depth per layer (0 = nearest the input); every collapsed layer needs one.

    Returns:
        rho in [-1, 1], or None with fewer than 2 collapsed layers or no variation in either.

    Raises:
        ValueError: if a collapsed layer has no depth.
    """
    names = [name for name, step in collapse_steps.items() if step is not None]
    missing = [name for name in names if name not in depths]
    if missing:
        raise ValueError(f"no depth for layers {missing}; depths given for: {', '.join(depths) or 'none'}")
    if len(names) < 2:
        return None
    return spearman([float(depths[name]) for name in names], [float(collapse_steps[name]) for name in names])  # type: ignore[arg-type]


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman rank correlation: the Pearson correlation of the average ranks (ties share the mean of
    their ranks), as ``scipy.stats.spearmanr`` computes it.

    Returns:
        rho in [-1, 1], or None with fewer than 2 points or no variation in either sequence.

    Raises:
        ValueError: on mismatched lengths or a non-finite value.
    """
    xs = as_floats("x", x, len(x))
    ys = as_floats("y", y, len(x))
    if not all(math.isfinite(v) for v in (*xs, *ys)):
        raise ValueError("spearman needs finite values; drop NaN/Inf points first")
    if len(xs) < 2:
        return None
    return _pearson(_average_ranks(xs), _average_ranks(ys))


def _average_ranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n, ties given the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def _pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson correlation, None when either side has no variation."""
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return None
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))
