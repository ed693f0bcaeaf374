"""Each measure's own transition: kinds, the search window counted on the evaluation steps, sparse measures."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from capgeo_callbacks.detection import DetectionSettings, Transition, measure_transition

STEPS = list(range(10, 210, 10))  # 20 evaluations


def test_collapse_kind_before_acquisition_is_a_precursor() -> None:
    values = [10, 12, 14, 12, 6, 3, 4, 8, 10, 12, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13]
    found = measure_transition(STEPS, values, acquisition_step=150, kind="collapse",
                               settings=DetectionSettings(smoothing=1))
    assert found == Transition("collapse", 60, True)


def test_crossing_kind() -> None:
    probe = [0.1] * 5 + [0.6] * 15  # readable from step 60
    assert measure_transition(STEPS, probe, 150, kind="crossing") == Transition("crossing", 60, True)
    # crossing within `window` evaluations of acquisition does not count as before it
    assert measure_transition(STEPS, probe, 80, kind="crossing") == Transition("crossing", 60, False)
    # the crossing level is settings.threshold
    assert measure_transition(STEPS, probe, 150, "crossing", DetectionSettings(threshold=0.7)) == Transition(
        "crossing", None, False)


def test_change_kind_is_the_later_point_of_the_largest_raw_change() -> None:
    sharp = [1.0] * 8 + [9.0] * 12  # jump between steps 80 and 90
    assert measure_transition(STEPS, sharp, 180, kind="change") == Transition("change", 90, True)
    # raw, not smoothed: a one-point spike of 4 (at step 50) beats a two-evaluation rise of 3 + 3 (steps 100,
    # 110); 3-point smoothing would pick the rise (smoothed changes 4/3 against 2, at step 100)
    spike = [0.0] * 4 + [4.0] + [0.0] * 4 + [3.0] + [6.0] * 10
    assert measure_transition(STEPS, spike, None, kind="change") == Transition("change", 50, None)
    # ties: the first largest change
    assert measure_transition(STEPS, [0.0] * 5 + [2.0] * 5 + [4.0] * 10, None, kind="change").step == 60
    # NaN points are skipped: the change is measured between neighbouring finite points
    gappy = [1.0, math.nan, math.nan, 7.0] + [7.0] * 16
    assert measure_transition(STEPS, gappy, None, kind="change").step == 40
    assert measure_transition(STEPS, [3.0] * 20, 150, kind="change") == Transition("change", None, False)
    assert measure_transition(STEPS[:1], [3.0], 150, kind="change") == Transition("change", None, False)


def test_not_acquired_and_unknown_kind() -> None:
    assert measure_transition(STEPS, [1.0] * 20, None, kind="change").precedes_acquisition is None
    assert measure_transition(STEPS, [0.1] * 5 + [0.6] * 15, None, kind="crossing") == Transition(
        "crossing", 60, None)
    with pytest.raises(ValueError, match="valid: collapse, crossing, change"):
        measure_transition(STEPS, [1.0] * 20, None, kind="peak")


def test_sparse_crossing_counted_on_reference_steps() -> None:
    sparse = STEPS[::4]  # measured every 4th evaluation: 10, 50, 90, 130, 170; acquisition at a step it skipped
    probe = [0.0, 0.9, 0.9, 0.9, 0.9]
    found = measure_transition(sparse, probe, acquisition_step=150, kind="crossing", reference_steps=STEPS)
    assert found == Transition("crossing", 50, True)  # 10 evaluations of the accuracy series before
    # counted on its own (sparse) evaluations, 50 is 3 evaluations before 150's slot: not before
    assert measure_transition(sparse, probe, 150, kind="crossing").precedes_acquisition is False


def test_precedes_boundary_is_the_window_in_reference_evaluations() -> None:
    reference = list(range(0, 300, 10))  # acquisition at evaluation 20 (step 200)
    for window in (0, 3, 5):
        settings = DetectionSettings(window=window)
        for before in (window, window + 1):
            step = 200 - 10 * before
            probe_steps = [0, step]  # a sparse measure: two points
            found = measure_transition(probe_steps, [0.0, 1.0], 200, "crossing", settings, reference_steps=reference)
            assert found == Transition("crossing", step, before > window)


# --- a sparse measure gives the dense answer ------------------------------------------------------
#
# 200 evaluations, every 10 steps; acquisition at evaluation 80 (step 800). The true transition is at
# evaluation 48, sampled by both every-8 and every-16 series; a bigger change (or deeper trough) starts
# 15 evaluations after acquisition, at evaluation 95.

REFERENCE = list(range(0, 2000, 10))
ACQUISITION = 800


def change_value(evaluation: int) -> float:
    """0, then 1 from evaluation 48 (the transition), then 5 from evaluation 95 (a bigger change)."""
    return 0.0 if evaluation < 48 else 1.0 if evaluation < 95 else 5.0


def collapse_value(evaluation: int) -> float:
    """10, with a V-shaped dip to 2 at evaluation 48 (24 evaluations either side) and a deeper, lasting trough
    of 0.5 on 95..120.

    The dip is a V so that the 3-point smoothed trough is at 48 in every sampling (every 16: smoothed 6.44,
    5.56, 6.44 at 32, 48, 64). A one-evaluation dip would tie three smoothed points and the first wins: the
    collapse would be reported one sampling interval early (470 dense, 400 every 8, 320 every 16).
    """
    if 95 <= evaluation <= 120:
        return 0.5
    return 10.0 - 8.0 * max(0.0, 1.0 - abs(evaluation - 48) / 24)


def sampled(function: Callable[[int], float], every: int) -> tuple[list[int], list[float]]:
    evaluations = range(0, len(REFERENCE), every)
    return [REFERENCE[e] for e in evaluations], [function(e) for e in evaluations]


@pytest.mark.parametrize(("kind", "function"), [("change", change_value), ("collapse", collapse_value)])
def test_sparse_measure_gives_the_dense_answer(kind: str, function: Callable[[int], float]) -> None:
    answers = {}
    for every in (1, 8, 16):
        steps, values = sampled(function, every)
        answers[every] = measure_transition(steps, values, ACQUISITION, kind, reference_steps=REFERENCE)
        # the later change is the bigger one: over the whole series it is what the measure finds
        whole = measure_transition(steps, values, None, kind)
        assert whole.step is not None and whole.step >= 950
        assert answers[every].step != whole.step  # ... and it is not returned
    assert answers[1] == answers[8] == answers[16] == Transition(kind, 480, True)


@pytest.mark.parametrize(("kind", "function"), [("change", change_value), ("collapse", collapse_value)])
def test_counting_the_window_on_the_measure_s_own_points_searches_past_acquisition(
        kind: str, function: Callable[[int], float]) -> None:
    window = DetectionSettings().window
    # the old rule: the search ends `window` of the measure's own points after acquisition
    for every, expected_end in ((8, 1040), (16, 1280)):
        steps, values = sampled(function, every)
        own_end = steps[steps.index(ACQUISITION) + window]
        assert own_end == expected_end  # evaluation 104 / 128: past the bigger change at 95..96
        # without reference steps the measure's own points are the reference: that rule, and its answer is the
        # later change, not before acquisition
        own = measure_transition(steps, values, ACQUISITION, kind)
        assert own.step is not None and own.step > ACQUISITION
        assert own.precedes_acquisition is False
    # the new rule ends the search `window` reference evaluations after acquisition, dense or sparse
    assert REFERENCE[REFERENCE.index(ACQUISITION) + window] == 830
