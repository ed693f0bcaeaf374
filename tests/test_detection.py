"""Detection on constructed series, with exact expected steps, floors and gaps."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from scipy import stats

from capgeo_callbacks.detection import (
    Alert,
    Collapse,
    LayerResult,
    PrecursorTracker,
    Transition,
    Verdict,
    detect_acquisition,
    detect_collapse,
    detect_logprob_emergence,
    layer_order,
    layer_verdict,
    measure_transition,
    precursor_verdict,
    run_verdict,
)

STEPS = [100 * i for i in range(20)]
# Collapse at index 8 (step 800), recovery confirmed at index 11 (step 1100), acquisition at index 15.
# Smoothed (width 3): 10 10 10 10 9.33 7.67 5.33 3.67 [3] 3.67 5 7 8.67 9.67 10 ...; level 3 + 0.1 * 7.
PRECURSOR_RANKME = [10, 10, 10, 10, 10, 8, 5, 3, 3, 3, 5, 7, 9, 10, 10, 10, 10, 10, 10, 10]
PRECURSOR_ACC = [0.0] * 13 + [0.1, 0.2, 0.6, 0.7, 0.8, 0.9, 1.0]
# RankMe still falling when accuracy crosses 0.5 at index 8 (step 800); trough at index 9.
SIMULTANEOUS_RANKME = [10] * 6 + [8, 6, 4, 3, 3, 4, 6, 8, 10, 10, 10, 10, 10, 10]
SIMULTANEOUS_ACC = [0.0] * 8 + [0.6] * 12


def feed(tracker: PrecursorTracker, steps: list[int], acc: list[float],
         layers: dict[str, list[float]]) -> list[Alert]:
    alerts = []
    for i, step in enumerate(steps):
        alerts += tracker.update(step, acc[i], {name: values[i] for name, values in layers.items()})
    return alerts


# --- acquisition and log-prob emergence ---------------------------------------------------------

def test_acquisition_requires_patience() -> None:
    steps = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]
    acc = [0.0, 0.9, 0.0, 0.0, 0.6, 0.7, 0.4, 0.6, 0.5, 0.6]  # a spike, a pair, then three (0.5 counts)
    assert detect_acquisition(steps, acc) == 70
    assert detect_acquisition(steps, acc, patience=1) == 10
    assert detect_acquisition(steps, acc, patience=2) == 40
    assert detect_acquisition(steps, acc, threshold=0.65, patience=1) == 10
    assert detect_acquisition(steps[:9], acc[:9]) is None  # only two confirming evaluations so far
    assert detect_acquisition(steps, [0.9, math.nan, 0.9, 0.9, 0.9, 0, 0, 0, 0, 0]) == 20  # NaN breaks it
    assert detect_acquisition([], []) is None


def test_never_reaching_threshold_is_not_acquired() -> None:
    acc = [0.1, 0.3, 0.49, 0.45, 0.49999] * 4
    steps = list(range(0, 200, 10))
    assert detect_acquisition(steps, acc) is None
    result = layer_verdict(steps, PRECURSOR_RANKME, acc)
    assert result.verdict == Verdict("not-acquired", None)
    assert result.acquisition_step is None
    assert result.collapse is not None and result.collapse.step == 80  # still reported
    assert run_verdict({"a": result}) == Verdict("not-acquired", None)


def test_logprob_emergence() -> None:
    steps = [0, 50, 100, 150]
    logprob = [-3.0, -1.0, math.log(0.5), -0.1]
    found = detect_logprob_emergence(steps, logprob, acc=[0.0, 0.05, 0.2, 0.7])
    assert found is not None
    assert (found.step, found.acc_at_step, found.logprob) == (100, 0.2, math.log(0.5))
    bare = detect_logprob_emergence(steps, logprob)
    assert bare is not None and bare.acc_at_step is None
    assert detect_logprob_emergence(steps, logprob, threshold=-0.01) is None


# --- collapse -------------------------------------------------------------------------------------

def test_drop_and_recovery_collapse_exact() -> None:
    collapse = detect_collapse(STEPS, PRECURSOR_RANKME)
    assert collapse == Collapse(step=800, floor=3.0, peak=10.0, peak_step=0, drop_fraction=pytest.approx(0.7),
                                recovery_step=1100)
    # more confirming evaluations -> later confirmation; a larger fraction -> later level
    assert detect_collapse(STEPS, PRECURSOR_RANKME, recovery_evals=3).recovery_step == 1200
    assert detect_collapse(STEPS, PRECURSOR_RANKME, recovery_fraction=0.9).recovery_step == 1400
    raw = detect_collapse(STEPS, PRECURSOR_RANKME, smoothing=1)
    assert (raw.step, raw.floor, raw.recovery_step) == (700, 3.0, 1100)  # first raw 3 at index 7


def test_early_expansion_then_collapse_counts() -> None:
    # RankMe starts low and rises first (spec §7: 21 -> 94 -> 31): the trough is above the initial value
    rankme = [21, 40, 70, 94, 94, 90, 70, 50, 31, 31, 31, 33, 36, 40, 40]
    steps = [250 * i for i in range(len(rankme))]
    collapse = detect_collapse(steps, rankme, smoothing=1)
    assert collapse is not None
    assert (collapse.step, collapse.peak, collapse.peak_step) == (2000, 94.0, 750)
    assert collapse.drop_fraction == pytest.approx(63 / 94)
    assert collapse.floor == 31.0  # from the peak on; the initial 21 is not the collapse floor
    assert collapse.recovery_step == 3500  # level 31 + 6.3: 36 is below, 40 and 40 confirm
    smoothed = detect_collapse(steps, rankme)
    assert smoothed is not None and smoothed.step == 2250 and smoothed.floor == 31.0


def test_small_drop_is_not_a_collapse() -> None:
    rankme = [10, 10, 8, 8, 10, 10]
    assert detect_collapse(list(range(6)), rankme, smoothing=1, min_drop=0.25) is None
    found = detect_collapse(list(range(6)), rankme, smoothing=1, min_drop=0.2)
    assert found is not None and found.step == 2 and found.recovery_step == 5
    assert detect_collapse(list(range(5)), [1, 2, 3, 4, 5]) is None  # monotone rise
    assert detect_collapse([], []) is None
    assert detect_collapse([0], [5.0]) is None


def test_noise_around_a_constant_gives_no_collapse_and_no_alert() -> None:
    rng = np.random.default_rng(1234)
    n = 80
    rankme = list(50 + 2.0 * rng.standard_normal(n))
    acc = [min(1.0, 0.02 * i) for i in range(n)]
    steps = [10 * i for i in range(n)]
    assert detect_collapse(steps, rankme) is None
    tracker = PrecursorTracker()
    assert feed(tracker, steps, acc, {"blocks.0": rankme, "blocks.1": rankme[::-1]}) == []
    assert tracker.acquired_step == 250
    summary = tracker.summary()
    assert summary["verdict"] == "no-collapse" and summary["gap"] is None
    assert summary["layers"]["blocks.0"]["collapse_step"] is None


def test_until_step_and_nan_points() -> None:
    rankme = [10.0, 10.0, 2.0, 10.0, 10.0, 1.0, 10.0]
    steps = [0, 1, 2, 3, 4, 5, 6]
    assert detect_collapse(steps, rankme, smoothing=1).step == 5
    early = detect_collapse(steps, rankme, smoothing=1, until_step=4)
    assert (early.step, early.floor, early.recovery_step) == (2, 2.0, 4)
    with_nan = [10.0, math.nan, 2.0, math.inf, 10.0, 10.0, 10.0]
    found = detect_collapse(steps, with_nan, smoothing=1)
    assert (found.step, found.recovery_step) == (2, 5)  # NaN/Inf points are skipped measurements


def test_incremental_use_is_cheap() -> None:
    rng = np.random.default_rng(0)
    values = list(30 + 10 * np.cos(np.linspace(0, 6, 256)) + rng.standard_normal(256))
    steps = list(range(0, 256 * 50, 50))
    start = time.perf_counter()
    for end in range(1, 257):
        detect_collapse(steps[:end], values[:end])
    assert time.perf_counter() - start < 2.0  # about 0.1 s: O(n) numpy per call


# --- verdicts -------------------------------------------------------------------------------------

def test_precursor_verdict_exact_gap() -> None:
    result = layer_verdict(STEPS, PRECURSOR_RANKME, PRECURSOR_ACC)
    assert result.acquisition_step == 1500
    assert result.verdict == Verdict("precursor", 700)
    assert result.collapse is not None and result.collapse.recovery_step == 1100
    assert result.floor == 3.0 and result.min_rankme == 3.0


def test_acquisition_inside_collapse_is_simultaneous() -> None:
    result = layer_verdict(STEPS, SIMULTANEOUS_RANKME, SIMULTANEOUS_ACC)
    assert result.acquisition_step == 800
    assert result.collapse is not None and result.collapse.step == 900
    assert result.verdict == Verdict("simultaneous", -100)


def test_late_collapse_does_not_mask_an_earlier_precursor() -> None:
    rankme = PRECURSOR_RANKME + [10, 10, 10, 6, 2, 1, 1, 1, 1, 1]  # a deeper collapse long after
    steps = [100 * i for i in range(len(rankme))]
    acc = PRECURSOR_ACC + [1.0] * 10
    result = layer_verdict(steps, rankme, acc)
    assert result.verdict == Verdict("precursor", 700)
    assert result.whole_series_collapse is not None and result.whole_series_collapse.step == 2600
    assert result.floor == 1.0  # the whole-series collapse floor
    whole = detect_collapse(steps, rankme)
    assert precursor_verdict(steps, 1500, whole) == Verdict("no-collapse", None)  # after acquisition


def test_precursor_verdict_rules() -> None:
    steps = [10 * i for i in range(30)]

    def collapse(step: int, recovery: int | None) -> Collapse:
        return Collapse(step=step, floor=1.0, peak=4.0, peak_step=0, drop_fraction=0.75,
                        recovery_step=recovery)

    assert precursor_verdict(steps, None, collapse(50, 80)) == Verdict("not-acquired", None)
    assert precursor_verdict(steps, 200, None) == Verdict("no-collapse", None)
    assert precursor_verdict(steps, 200, collapse(170, 190)) == Verdict("simultaneous", 30)  # 3 evals before
    assert precursor_verdict(steps, 200, collapse(230, None)) == Verdict("simultaneous", -30)  # 3 after
    assert precursor_verdict(steps, 200, collapse(240, 260)) == Verdict("no-collapse", None)  # 4 after
    assert precursor_verdict(steps, 200, collapse(160, 200)) == Verdict("precursor", 40)  # recovered at acq
    assert precursor_verdict(steps, 200, collapse(160, 210)) == Verdict("simultaneous", 40)  # recovered later
    assert precursor_verdict(steps, 200, collapse(160, None)) == Verdict("simultaneous", 40)
    assert precursor_verdict(steps, 200, collapse(160, 200), window=4) == Verdict("simultaneous", 40)
    assert precursor_verdict(steps, 200, collapse(190, 195), window=0) == Verdict("precursor", 10)
    with pytest.raises(ValueError, match="not one of the evaluation steps"):
        precursor_verdict(steps, 205, collapse(160, 200))


def test_run_verdict() -> None:
    def result(verdict: str, gap: int | None, acquired: int | None = 1000) -> LayerResult:
        return LayerResult(acquired, None, Verdict(verdict, gap), None, None, None)  # type: ignore[arg-type]

    layers = {"a": result("simultaneous", 50), "b": result("precursor", 300), "c": result("precursor", 700),
              "d": result("no-collapse", None)}
    assert run_verdict(layers) == Verdict("precursor", 700, "c")
    assert run_verdict({"a": result("simultaneous", -20), "b": result("simultaneous", 40),
                        "d": result("no-collapse", None)}) == Verdict("simultaneous", 40, "b")
    assert run_verdict({"d": result("no-collapse", None)}) == Verdict("no-collapse", None)
    assert run_verdict({"x": result("not-acquired", None, None)}) == Verdict("not-acquired", None)
    with pytest.raises(ValueError):
        run_verdict({})


# --- layer order ----------------------------------------------------------------------------------

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


def test_layer_order_degenerate() -> None:
    assert layer_order({"a": 100, "b": None}, {"a": 0, "b": 1}) is None
    assert layer_order({"a": 100, "b": 100}, {"a": 0, "b": 1}) is None  # no variation
    assert layer_order({"a": 100, "b": 300}, {"a": 0, "b": 1}) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no depth"):
        layer_order({"a": 100, "b": 300}, {"a": 0})


# --- tracker --------------------------------------------------------------------------------------

def test_tracker_raises_each_alert_once() -> None:
    late = [10] * 9 + [7, 4, 3, 3, 5, 7, 9, 10, 10, 10, 10]  # smoothed trough 1100, recovery 1400
    tracker = PrecursorTracker()
    alerts = feed(tracker, STEPS, PRECURSOR_ACC, {"blocks.0": PRECURSOR_RANKME, "blocks.1": late})
    assert alerts == [
        Alert("layer", "blocks.0", 1100, 800, 3.0, 1100),
        Alert("run", "blocks.0", 1100, 800, 3.0, 1100),
        Alert("layer", "blocks.1", 1400, 1100, 3.0, 1400),
    ]
    assert tracker.alerts == alerts
    assert tracker.acquired_step == 1500
    assert tracker.update(2000, 1.0, {"blocks.0": 1.0, "blocks.1": 1.0}) == []  # acquired: no new alerts
    summary = tracker.summary(depths={"blocks.0": 0, "blocks.1": 1})
    json.dumps(summary, allow_nan=False)
    assert (summary["verdict"], summary["gap"], summary["verdict_layer"]) == ("precursor", 700, "blocks.0")
    assert summary["acquisition_step"] == 1500
    assert summary["layers"]["blocks.1"]["verdict"] == "precursor"
    assert summary["layers"]["blocks.1"]["gap"] == 400
    assert summary["layers"]["blocks.0"]["recovery_step"] == 1100
    assert summary["layer_order_rho"] == pytest.approx(1.0)
    assert summary["series"]["rankme/blocks.0"][:2] == [[0, 10.0], [100, 10.0]]
    assert len(summary["series"]["acc"]) == 21


def test_tracker_no_alert_when_acquired_first() -> None:
    tracker = PrecursorTracker()
    assert feed(tracker, STEPS, SIMULTANEOUS_ACC, {"a": SIMULTANEOUS_RANKME}) == []
    assert tracker.summary()["verdict"] == "simultaneous"


@pytest.mark.parametrize("cut", [5, 10, 11, 12, 14])
def test_tracker_state_dict_round_trip(cut: int) -> None:
    layers = {"blocks.0": PRECURSOR_RANKME, "blocks.1": [10] * 9 + [7, 4, 3, 3, 5, 7, 9, 10, 10, 10, 10]}
    reference = PrecursorTracker()
    expected = feed(reference, STEPS, PRECURSOR_ACC, layers)
    first = PrecursorTracker()
    before = feed(first, STEPS[:cut], PRECURSOR_ACC[:cut], {k: v[:cut] for k, v in layers.items()})
    state = json.loads(json.dumps(first.state_dict(), allow_nan=False))
    resumed = PrecursorTracker()
    resumed.load_state_dict(state)
    assert resumed.steps == first.steps and resumed.alerts == before
    after = feed(resumed, STEPS[cut:], PRECURSOR_ACC[cut:], {k: v[cut:] for k, v in layers.items()})
    assert before + after == expected  # nothing repeated, nothing lost
    assert resumed.summary() == reference.summary()
    assert resumed.state_dict() == reference.state_dict()


def test_tracker_missing_values_and_repeated_steps() -> None:
    tracker = PrecursorTracker()
    tracker.update(0, 0.0, {"a": 5.0})
    tracker.update(10, math.nan, {"b": 4.0})  # "a" skipped, "b" new, accuracy missing
    tracker.update(20, 0.1, {"a": math.nan, "b": 4.5})
    assert tracker.rankme_series() == {"a": [[0, 5.0]], "b": [[10, 4.0], [20, 4.5]]}
    state = tracker.state_dict()
    assert state["acc"] == [0.0, None, 0.1] and state["rankme"]["a"] == [5.0, None, None]
    json.dumps(state, allow_nan=False)
    tracker.update(20, 0.2, {"a": 6.0, "b": 4.4})  # the same step again replaces that evaluation
    tracker.update(15, 0.3, {"a": 6.5})  # an earlier step drops what came after it
    assert tracker.steps == [0, 10, 15] and tracker.acc[2] == 0.3
    assert tracker.rankme_series() == {"a": [[0, 5.0], [15, 6.5]], "b": [[10, 4.0]]}


def test_tracker_load_tolerates_missing_keys_and_rejects_inconsistent_state() -> None:
    tracker = PrecursorTracker()
    tracker.load_state_dict({})
    assert tracker.steps == [] and tracker.alerts == [] and tracker.acquired_step is None
    assert tracker.summary()["verdict"] == "not-acquired"
    with pytest.raises(ValueError, match="inconsistent"):
        tracker.load_state_dict({"steps": [0, 1], "acc": [0.1]})


@pytest.mark.parametrize(("name", "value", "message"), [
    ("threshold", 0.0, r"\(0, 1\]"), ("threshold", 1.5, r"\(0, 1\]"),
    ("patience", 0, ">= 1"), ("patience", 2.5, ">= 1"), ("window", -1, ">= 0"),
    ("min_drop", 0.0, r"\(0, 1\)"), ("min_drop", 1.0, r"\(0, 1\)"),
    ("recovery_fraction", 0.0, r"\(0, 1\]"), ("recovery_fraction", 1.5, r"\(0, 1\]"),
    ("recovery_evals", 0, ">= 1"),
    ("smoothing", 0, "odd"), ("smoothing", 4, "odd"), ("smoothing", True, "odd"),
])
def test_bad_settings_raise(name: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PrecursorTracker(**{name: value})  # type: ignore[arg-type]


def test_bad_series_raise() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        detect_acquisition([0, 10, 10], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="3 steps"):
        detect_collapse([0, 1, 2], [1.0, 2.0])
    with pytest.raises(ValueError, match="integer"):
        detect_acquisition([0, 1.5], [0.1, 0.2])
    with pytest.raises(TypeError, match="unknown collapse settings"):
        layer_verdict(STEPS, PRECURSOR_RANKME, PRECURSOR_ACC, until_step=5)


class TestMeasureTransition:
    steps = list(range(10, 210, 10))  # 20 evaluations

    def test_collapse_kind_before_acquisition_is_a_precursor(self) -> None:
        values = [10, 12, 14, 12, 6, 3, 4, 8, 10, 12, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13]
        t = measure_transition(self.steps, values, acquisition_step=150, kind="collapse", smoothing=1)
        assert t == Transition("collapse", 60, True)

    def test_crossing_kind(self) -> None:
        probe = [0.1] * 5 + [0.6] * 15  # readable from step 60
        assert measure_transition(self.steps, probe, 150, kind="crossing") == Transition("crossing", 60, True)
        # crossing within `window` evaluations of acquisition does not count as before it
        assert measure_transition(self.steps, probe, 80, kind="crossing").precedes_acquisition is False

    def test_change_kind_finds_the_largest_jump(self) -> None:
        sharp = [1.0] * 8 + [9.0] * 12  # jump between steps 80 and 90
        t = measure_transition(self.steps, sharp, 180, kind="change")
        assert t.kind == "change" and t.step in (80, 90, 100) and t.precedes_acquisition is True

    def test_not_acquired_and_sparse_series(self) -> None:
        assert measure_transition(self.steps, [1.0] * 20, None, kind="change").precedes_acquisition is None
        sparse = self.steps[::4]  # measured every 4th evaluation; acquisition at a step it skipped
        probe = [0.0, 0.9, 0.9, 0.9, 0.9]
        t = measure_transition(sparse, probe, acquisition_step=150, kind="crossing", reference_steps=self.steps)
        assert t == Transition("crossing", 50, True)  # 10 evaluations of the accuracy series before
        # counted on its own (sparse) evaluations, 50 is 3 evaluations before 150's slot: not before
        assert measure_transition(sparse, probe, 150, kind="crossing").precedes_acquisition is False
        with pytest.raises(ValueError, match="valid: collapse, crossing, change"):
            measure_transition(self.steps, [1.0] * 20, None, kind="peak")
