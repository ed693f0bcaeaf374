"""The warm-up ablation's measures, against answers worked out by hand."""

from __future__ import annotations

import pytest

from study.ablation import summed_rate, troughs


def run(lr: list[tuple[int, float]], rankme: list[tuple[int, float]]) -> dict:
    return {"series": {"lr": lr, "rankme/blocks.0": rankme}}


def test_summed_rate_of_a_linear_warm_up_is_the_triangle() -> None:
    # warm-up over 100 steps to a peak of 1e-3, evaluations at uneven steps
    steps = [0, 3, 10, 25, 50, 80, 100, 150, 200]
    lr = [(s, 1e-3 * min(s, 100) / 100) for s in steps]
    summary = run(lr, [(s, 1.0) for s in steps])
    assert summed_rate(summary, 50) == pytest.approx(50 * 50 / 200)  # half of 50 x (50/100)
    assert summed_rate(summary, 100) == pytest.approx(50.0)
    assert summed_rate(summary, 150) == pytest.approx(100.0)  # the triangle, then 50 steps at the peak
    assert summed_rate(summary, 60) == pytest.approx(60 * 60 / 200)  # between two evaluations
    assert summed_rate(run([], []), 10) is None


def test_the_trough_and_its_drop_from_the_peak_before_it() -> None:
    rankme = [(0, 10.0), (10, 20.0), (20, 5.0), (30, 8.0), (700, 1.0)]  # the point past step 600 is ignored
    [(step, value, drop)] = troughs(run([], rankme)).values()
    assert (step, value) == (20, 5.0) and drop == pytest.approx(0.75)
