"""Statistics the scorer, the labels and the reports share: Wilson intervals for proportions.

One home for them, so that a label ("fell back below 0.5 minus the validation set's half-width") and a
reported rate ("5/8 [0.31, 0.86]") use the same interval: scipy's (``binomtest(k, n).proportion_ci(method=
"wilson")``), which is exactly 0 at k = 0 and exactly 1 at k = n.
"""

from __future__ import annotations

import math

from scipy.stats import binomtest, norm

__all__ = ["Z95", "wilson", "wilson_half_width"]

Z95 = float(norm.ppf(0.975))  # the two-sided 95% normal quantile (scipy's Wilson interval uses the same)


def wilson(successes: int, n: int) -> tuple[float, float] | None:
    """The Wilson score 95% interval of ``successes`` out of ``n`` (scipy's); None for n = 0."""
    if n == 0:
        return None
    interval = binomtest(successes, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(interval.low), float(interval.high)


def wilson_half_width(p: float, n: int, z: float = Z95) -> float:
    """Half the width of the Wilson interval at proportion ``p`` on ``n`` trials: about 0.043 at p = 0.5, n = 512.

    A noise scale at any ``p`` (``p * n`` need not be a whole count, so it is written out rather than asked of
    ``binomtest``); at a whole count it is half of :func:`wilson`'s width (tests/detection/test_stats.py)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
