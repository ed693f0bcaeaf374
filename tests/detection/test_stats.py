"""Wilson intervals against scipy's own."""

from __future__ import annotations

import pytest
from scipy.stats import binomtest

from capgeo_callbacks.detection.stats import wilson, wilson_half_width


@pytest.mark.parametrize(("k", "n"), [(0, 5), (5, 8), (13, 15), (256, 512), (512, 512), (1, 1)])
def test_wilson_matches_scipy(k: int, n: int) -> None:
    reference = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson(k, n) == pytest.approx((reference.low, reference.high), abs=1e-6)


def test_half_width_at_half_on_512_questions() -> None:
    low, high = wilson(256, 512)
    assert wilson_half_width(0.5, 512) == pytest.approx((high - low) / 2, abs=1e-12)
    assert wilson_half_width(0.5, 512) == pytest.approx(0.0431, abs=1e-4)
    assert wilson(0, 0) is None
    with pytest.raises(ValueError, match="n must be at least 1"):
        wilson_half_width(0.5, 0)


def test_wilson_reaches_exactly_zero_and_one_at_the_ends() -> None:
    # the interval of k = n is [.., 1] mathematically; floating point put 33/33's upper end a hair below 1, and a
    # claim of 100% then read "not reproduced" with every run agreeing
    for n in range(1, 200):
        assert wilson(n, n)[1] == 1.0 and wilson(0, n)[0] == 0.0
        if n > 1:
            low, high = wilson(n // 2, n)
            assert 0.0 < low < high < 1.0
