"""Layer order of a collapse and the Spearman correlation, against scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from capgeo_callbacks.detection import layer_order, spearman


def test_layer_order_matches_scipy_with_ties() -> None:
    collapse = {"b0": 900, "b1": 700, "b2": 700, "b3": 300, "b4": None, "final": 100}
    depths = {"b0": 0, "b1": 1, "b2": 2, "b3": 3, "b4": 4, "final": 5}
    names = [n for n, s in collapse.items() if s is not None]
    expected = stats.spearmanr([depths[n] for n in names], [collapse[n] for n in names]).statistic
    rho = layer_order(collapse, depths)
    assert rho == pytest.approx(expected, abs=1e-12)
    assert rho < 0  # top-down: deeper layers collapse first
    rng = np.random.default_rng(5)
    for _ in range(20):
        steps = {f"l{i}": int(s) for i, s in enumerate(rng.integers(0, 5, size=7) * 100)}
        depth = {f"l{i}": int(d) for i, d in enumerate(rng.integers(0, 4, size=7))}
        reference = stats.spearmanr(list(depth.values()), list(steps.values())).statistic
        got = layer_order(steps, depth)
        if np.isnan(reference):
            assert got is None
        else:
            assert got == pytest.approx(reference, abs=1e-12)


def test_layer_order_sign() -> None:
    depths = {"b0": 0, "b1": 1, "b2": 2}
    assert layer_order({"b0": 1000, "b1": 900, "b2": 800}, depths) == pytest.approx(-1.0)  # top-down
    assert layer_order({"b0": 800, "b1": 900, "b2": 1000}, depths) == pytest.approx(1.0)  # bottom-up
    assert layer_order({"b0": 900, "b1": 800, "b2": 900}, depths) == pytest.approx(0.0)


def test_layer_order_degenerate() -> None:
    assert layer_order({"a": 100, "b": None}, {"a": 0, "b": 1}) is None
    assert layer_order({"a": 100, "b": 100}, {"a": 0, "b": 1}) is None  # no variation
    assert layer_order({"a": 100, "b": 300}, {"a": 0, "b": 1}) == pytest.approx(1.0)
    assert layer_order({}, {}) is None
    with pytest.raises(ValueError, match="no depth"):
        layer_order({"a": 100, "b": 300}, {"a": 0})
    # a layer without a collapse needs no depth
    assert layer_order({"a": 100, "b": 300, "c": None}, {"a": 0, "b": 1}) == pytest.approx(1.0)


def test_spearman() -> None:
    rng = np.random.default_rng(11)
    for _ in range(20):
        x = list(rng.integers(0, 6, size=9).astype(float))
        y = list(rng.normal(size=9))
        reference = stats.spearmanr(x, y).statistic
        got = spearman(x, y)
        if np.isnan(reference):
            assert got is None
        else:
            assert got == pytest.approx(reference, abs=1e-12)
    assert spearman([1.0, 2.0, 3.0], [30.0, 20.0, 10.0]) == pytest.approx(-1.0)
    assert spearman([1.0], [2.0]) is None
    assert spearman([], []) is None
    assert spearman([1.0, 1.0], [1.0, 2.0]) is None
    with pytest.raises(ValueError, match="finite"):
        spearman([1.0, math.nan], [1.0, 2.0])
    with pytest.raises(ValueError, match="2 values but there are 3"):
        spearman([1.0, 2.0, 3.0], [1.0, 2.0])
