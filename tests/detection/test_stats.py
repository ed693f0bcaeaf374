"""Wilson intervals (scipy's) and the half-width written out for any proportion."""

from __future__ import annotations

import pytest

from capgeo_callbacks.detection.stats import wilson, wilson_half_width


@pytest.mark.parametrize(("k", "n"), [(5, 8), (13, 15), (256, 512), (100, 400)])
def test_half_width_is_half_the_interval_at_whole_counts(k: int, n: int) -> None:
    low, high = wilson(k, n)  # type: ignore[misc]
    assert wilson_half_width(k / n, n) == pytest.approx((high - low) / 2, abs=1e-12)


def test_known_values() -> None:
    assert wilson(1, 3) == pytest.approx((0.0615, 0.7923), abs=1e-4)
    assert wilson_half_width(0.5, 512) == pytest.approx(0.0431, abs=1e-4)
    assert wilson(0, 0) is None
    with pytest.raises(ValueError, match="n must be at least 1"):
        wilson_half_width(0.5, 0)


def test_wilson_reaches_exactly_zero_and_one_at_the_ends() -> None:
    # a claim of 100% read "not reproduced" with every run agreeing when 33/33's upper end fell a hair below 1
    for n in range(1, 200):
        assert wilson(n, n)[1] == 1.0 and wilson(0, n)[0] == 0.0  # type: ignore[index]
        if n > 1:
            low, high = wilson(n // 2, n)  # type: ignore[misc]
            assert 0.0 < low < high < 1.0
