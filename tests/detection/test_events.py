"""Acquisition, log-prob emergence, collapse and verdicts on constructed series, with exact answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from capgeo_callbacks.detection import (
    Collapse,
    DetectionSettings,
    LayerResult,
    Verdict,
    detect_acquisition,
    detect_collapse,
    detect_logprob_emergence,
    layer_verdict,
    precursor_verdict,
    run_verdict,
)
from tests.detection.conftest import (
    PRECURSOR_ACC,
    PRECURSOR_RANKME,
    SIMULTANEOUS_ACC,
    SIMULTANEOUS_RANKME,
    STEPS,
)

# --- acquisition and log-prob emergence ---------------------------------------------------------


def test_acquisition_requires_patience() -> None:
    steps = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]
    acc = [0.0, 0.9, 0.0, 0.0, 0.6, 0.7, 0.4, 0.6, 0.5, 0.6]  # a spike, a pair, then three (0.5 counts)
    assert detect_acquisition(steps, acc) == 70
    assert detect_acquisition(steps, acc, patience=1) == 10
    assert detect_acquisition(steps, acc, patience=2) == 40
    assert detect_acquisition(steps, acc, threshold=0.65, patience=1) == 10
    assert detect_acquisition(steps, acc, threshold=0.65, patience=2) is None
    assert detect_acquisition(steps[:9], acc[:9]) is None  # only two confirming evaluations so far
    assert detect_acquisition(steps, [0.9, math.nan, 0.9, 0.9, 0.9, 0, 0, 0, 0, 0]) == 20  # NaN breaks it
    assert detect_acquisition([], []) is None


def test_acquisition_validates_threshold_and_patience() -> None:
    with pytest.raises(ValueError, match=r"threshold must be an accuracy in \(0, 1\]"):
        detect_acquisition([0, 1], [0.1, 0.2], threshold=0)
    with pytest.raises(ValueError, match="patience must be an integer >= 1"):
        detect_acquisition([0, 1], [0.1, 0.2], patience=0)


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
    later = detect_logprob_emergence(steps, logprob, threshold=-0.5)
    assert later is not None and later.step == 150
    with pytest.raises(ValueError, match="logprob_threshold must be a finite log-probability <= 0"):
        detect_logprob_emergence(steps, logprob, threshold=0.5)


# --- collapse -------------------------------------------------------------------------------------


def test_drop_and_recovery_collapse_exact() -> None:
    collapse = detect_collapse(STEPS, PRECURSOR_RANKME)
    assert collapse == Collapse(step=800, floor=3.0, peak=10.0, peak_step=0, drop_fraction=pytest.approx(0.7),
                                recovery_step=1100, trough=3.0, noise=collapse.noise)
    # more confirming evaluations -> later confirmation; a larger fraction -> later level
    assert detect_collapse(STEPS, PRECURSOR_RANKME, DetectionSettings(recovery_evals=3)).recovery_step == 1200
    assert detect_collapse(STEPS, PRECURSOR_RANKME, DetectionSettings(recovery_fraction=0.9)).recovery_step == 1400
    raw = detect_collapse(STEPS, PRECURSOR_RANKME, DetectionSettings(smoothing=1))
    assert raw is not None
    assert (raw.step, raw.floor, raw.recovery_step) == (700, 3.0, 1100)  # first raw 3 at index 7


def test_early_expansion_then_collapse_counts() -> None:
    # RankMe starts low and rises first (21 -> 94 -> 31): the trough is above the initial value
    rankme = [21, 40, 70, 94, 94, 90, 70, 50, 31, 31, 31, 33, 36, 40, 40]
    steps = [250 * i for i in range(len(rankme))]
    collapse = detect_collapse(steps, rankme, DetectionSettings(smoothing=1))
    assert collapse is not None
    assert (collapse.step, collapse.peak, collapse.peak_step) == (2000, 94.0, 750)
    assert collapse.drop_fraction == pytest.approx(63 / 94)
    assert collapse.floor == 31.0  # from the peak on; the initial 21 is not the collapse floor
    assert collapse.recovery_step == 3500  # level 31 + 6.3: 36 is below, 40 and 40 confirm
    smoothed = detect_collapse(steps, rankme)
    assert smoothed is not None and smoothed.step == 2250 and smoothed.floor == 31.0


def test_small_drop_is_not_a_collapse() -> None:
    rankme = [10, 10, 8, 8, 10, 10]
    assert detect_collapse(list(range(6)), rankme, DetectionSettings(smoothing=1, min_drop=0.25)) is None
    found = detect_collapse(list(range(6)), rankme, DetectionSettings(smoothing=1, min_drop=0.2))
    assert found is not None and found.step == 2 and found.recovery_step == 5
    assert detect_collapse(list(range(5)), [1, 2, 3, 4, 5]) is None  # monotone rise
    assert detect_collapse([], []) is None
    assert detect_collapse([0], [5.0]) is None
    assert detect_collapse([0, 1, 2], [math.nan, math.nan, math.nan]) is None


def test_noise_around_a_constant_gives_no_collapse() -> None:
    rng = np.random.default_rng(1234)
    rankme = list(50 + 2.0 * rng.standard_normal(80))
    steps = [10 * i for i in range(80)]
    assert detect_collapse(steps, rankme) is None
    assert detect_collapse(steps, rankme[::-1]) is None


def test_until_step_and_nan_points() -> None:
    rankme = [10.0, 10.0, 2.0, 10.0, 10.0, 1.0, 10.0]
    steps = [0, 1, 2, 3, 4, 5, 6]
    raw = DetectionSettings(smoothing=1)
    whole = detect_collapse(steps, rankme, raw)
    assert whole is not None and whole.step == 5
    early = detect_collapse(steps, rankme, raw, until_step=4)
    assert early is not None
    assert (early.step, early.floor, early.recovery_step) == (2, 2.0, 4)
    with_nan = [10.0, math.nan, 2.0, math.inf, 10.0, 10.0, 10.0]
    found = detect_collapse(steps, with_nan, raw)
    assert found is not None
    assert (found.step, found.recovery_step) == (2, 5)  # NaN/Inf points are skipped measurements


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


def test_layer_verdict_uses_the_settings() -> None:
    # window 7: the trough, 7 evaluations before acquisition, is within it
    wide = layer_verdict(STEPS, PRECURSOR_RANKME, PRECURSOR_ACC, DetectionSettings(window=7))
    assert wide.verdict == Verdict("simultaneous", 700)
    strict = layer_verdict(STEPS, PRECURSOR_RANKME, PRECURSOR_ACC, DetectionSettings(min_drop=0.75))
    assert strict.collapse is None and strict.verdict == Verdict("no-collapse", None)
    early = layer_verdict(STEPS, PRECURSOR_RANKME, PRECURSOR_ACC, DetectionSettings(threshold=0.1, patience=2))
    assert early.acquisition_step == 1300  # 0.1 and 0.2 at 1300 and 1400
    assert early.verdict == Verdict("precursor", 500)


def test_late_collapse_does_not_mask_an_earlier_precursor() -> None:
    rankme = PRECURSOR_RANKME + [10, 10, 10, 6, 2, 1, 1, 1, 1, 1]  # a deeper collapse long after
    steps = [100 * i for i in range(len(rankme))]
    acc = PRECURSOR_ACC + [1.0] * 10
    result = layer_verdict(steps, rankme, acc)
    assert result.verdict == Verdict("precursor", 700)
    assert result.collapse is not None and result.collapse.step == 800  # searched up to step 1800
    whole = detect_collapse(steps, rankme)
    assert whole is not None and whole.step == 2600
    assert result.floor == whole.floor == 1.0  # the floor is the whole-series collapse's
    assert result.min_rankme == 1.0
    assert precursor_verdict(steps, 1500, whole) == Verdict("no-collapse", None)  # after acquisition


def test_precursor_verdict_rules() -> None:
    steps = [10 * i for i in range(30)]

    def collapse(step: int, recovery: int | None) -> Collapse:
        return Collapse(step=step, floor=1.0, peak=4.0, peak_step=0, drop_fraction=0.75, recovery_step=recovery)

    assert precursor_verdict(steps, None, collapse(50, 80)) == Verdict("not-acquired", None)
    assert precursor_verdict(steps, 200, None) == Verdict("no-collapse", None)
    assert precursor_verdict(steps, 200, collapse(170, 190)) == Verdict("simultaneous", 30)  # 3 evals before
    assert precursor_verdict(steps, 200, collapse(230, None)) == Verdict("simultaneous", -30)  # 3 after
    assert precursor_verdict(steps, 200, collapse(240, 260)) == Verdict("no-collapse", None)  # 4 after
    assert precursor_verdict(steps, 200, collapse(160, 200)) == Verdict("precursor", 40)  # recovered at acq
    assert precursor_verdict(steps, 200, collapse(160, 210)) == Verdict("simultaneous", 40)  # recovered later
    assert precursor_verdict(steps, 200, collapse(160, None)) == Verdict("simultaneous", 40)
    assert precursor_verdict(steps, 200, collapse(160, 200), DetectionSettings(window=4)) == Verdict(
        "simultaneous", 40)
    assert precursor_verdict(steps, 200, collapse(190, 195), DetectionSettings(window=0)) == Verdict("precursor", 10)
    with pytest.raises(ValueError, match="not one of the evaluation steps"):
        precursor_verdict(steps, 205, collapse(160, 200))
    with pytest.raises(ValueError, match="not one of the evaluation steps"):
        precursor_verdict(steps, 200, collapse(165, 200))


def test_window_counts_evaluations_not_steps() -> None:
    # irregular evaluation steps: the collapse is 3 evaluations but 900 steps before acquisition
    steps = [0, 100, 200, 300, 1000, 1100, 1200]

    def collapse(step: int) -> Collapse:
        return Collapse(step=step, floor=1.0, peak=4.0, peak_step=0, drop_fraction=0.75, recovery_step=step)

    assert precursor_verdict(steps, 1200, collapse(300)) == Verdict("simultaneous", 900)
    assert precursor_verdict(steps, 1200, collapse(200)) == Verdict("precursor", 1000)


def test_run_verdict() -> None:
    def result(verdict: str, gap: int | None, acquired: int | None = 1000) -> LayerResult:
        return LayerResult(acquired, None, Verdict(verdict, gap), None, None)  # type: ignore[arg-type]

    layers = {"a": result("simultaneous", 50), "b": result("precursor", 300), "c": result("precursor", 700),
              "d": result("no-collapse", None)}
    assert run_verdict(layers) == Verdict("precursor", 700, "c")
    assert run_verdict({"a": result("simultaneous", -20), "b": result("simultaneous", 40),
                        "d": result("no-collapse", None)}) == Verdict("simultaneous", 40, "b")
    assert run_verdict({"d": result("no-collapse", None)}) == Verdict("no-collapse", None)
    assert run_verdict({"x": result("not-acquired", None, None)}) == Verdict("not-acquired", None)
    # with no layer, `acquired` decides (the old API raised on an empty mapping)
    assert run_verdict({}) == Verdict("not-acquired", None)
    assert run_verdict({}, acquired=True) == Verdict("no-collapse", None)
    assert run_verdict({}, acquired=False) == Verdict("not-acquired", None)


# --- bad input ------------------------------------------------------------------------------------


def test_bad_series_raise() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        detect_acquisition([0, 10, 10], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="3 steps"):
        detect_collapse([0, 1, 2], [1.0, 2.0])
    with pytest.raises(ValueError, match="integer"):
        detect_acquisition([0, 1.5], [0.1, 0.2])
    with pytest.raises(ValueError, match="real number"):
        detect_collapse([0, 1], [1.0, "a lot"])
    assert detect_acquisition([0.0, 10.0], [0.9, 0.9], patience=2) == 0  # integral floats are steps


def test_old_keyword_settings_are_rejected() -> None:
    # settings travel in one DetectionSettings now; layer_verdict sets until_step itself
    with pytest.raises(TypeError):
        layer_verdict(STEPS, PRECURSOR_RANKME, PRECURSOR_ACC, until_step=5)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        detect_collapse(STEPS, PRECURSOR_RANKME, min_drop=0.2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        precursor_verdict(STEPS, 1500, None, window=4)  # type: ignore[call-arg]


def test_guard_steps_ignore_a_warm_up_dip() -> None:
    # a dip at steps 100-200 (inside a warm-up), then a flat series: the dip is the only collapse
    values = [10.0, 4.0, 4.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0]
    steps = list(range(0, 1000, 100))
    found = detect_collapse(steps, values, DetectionSettings(smoothing=1))
    assert found is not None and found.step == 100
    assert detect_collapse(steps, values, DetectionSettings(smoothing=1, guard_steps=300)) is None


def test_noise_units_ask_the_drop_and_the_rise_to_stand_out_of_the_noise() -> None:
    # alternating +-1 around 10 (noise sigma = 1.4826 * 2 / sqrt 2 = 2.097), a drop to 6, back to 10
    values = [10.0 + (1.0 if i % 2 else -1.0) for i in range(12)] + [6.0, 6.0] + [10.0] * 6
    steps = list(range(len(values)))
    plain = detect_collapse(steps, values, DetectionSettings(smoothing=1))
    assert plain is not None and plain.noise == pytest.approx(1.4826 * 2 / math.sqrt(2))
    assert plain.drop_in_noise_units == pytest.approx((11.0 - 6.0) / plain.noise)
    assert detect_collapse(steps, values, DetectionSettings(smoothing=1, noise_units=2.0)) is not None
    assert detect_collapse(steps, values, DetectionSettings(smoothing=1, noise_units=3.0)) is None  # 5 < 6.3


def test_min_recovery_asks_an_absolute_rise() -> None:
    values = [3.0, 1.2, 1.0, 1.3, 1.4, 1.5, 1.6]
    steps = list(range(len(values)))
    assert detect_collapse(steps, values, DetectionSettings(smoothing=1)).recovery_step == 4
    assert detect_collapse(steps, values, DetectionSettings(smoothing=1, min_recovery=1.0)).recovery_step is None
