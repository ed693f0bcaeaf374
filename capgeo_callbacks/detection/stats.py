"""Statistics the scorer, the labels and the reports share: Wilson intervals for proportions.

One home for them, so that a label ("fell back below 0.5 minus the validation set's half-width") and a
reported rate ("5/8 [0.31, 0.86]") use the same formula.
"""

from __future__ import annotations

import math

__all__ = ["Z95", "wilson", "wilson_half_width"]

Z95 = 1.959964  # the two-sided 95% normal quantile


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval of ``successes`` out of ``n`` (95% by default); None for n = 0."""
    if n == 0:
        return None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # at k = 0 and k = n the bound is exactly 0 or 1; the floating-point sum can land a hair inside it
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def wilson_half_width(p: float, n: int, z: float = Z95) -> float:
    """Half the width of the Wilson interval at proportion ``p`` on ``n`` trials: about 0.043 at p = 0.5, n = 512."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
