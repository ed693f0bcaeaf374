"""Precursor alerts: raised at the right evaluation, once, never once acquired; replay equals live."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capgeo_callbacks.detection import (
    Alert,
    DetectionSettings,
    alert_from_record,
    detect_acquisition,
    detect_collapse,
    scan_alerts,
)
from capgeo_callbacks.run.tracker import RunTracker
from tests.detection.conftest import (
    LATE_RANKME,
    PRECURSOR_ACC,
    PRECURSOR_RANKME,
    SIMULTANEOUS_ACC,
    SIMULTANEOUS_RANKME,
    STEPS,
    core,
    feed,
    replayed,
)

LAYERS = {"blocks.0": PRECURSOR_RANKME, "blocks.1": LATE_RANKME}
EXPECTED = [
    ("layer", "blocks.0", 1100, 800, 3.0, 1100),
    ("run", "blocks.0", 1100, 800, 3.0, 1100),
    ("layer", "blocks.1", 1400, 1100, 3.0, 1400),
]


def prefix(end: int, layers: dict[str, list[float]] = LAYERS) -> tuple[list[int], list[float], dict]:
    return STEPS[:end], PRECURSOR_ACC[:end], {name: values[:end] for name, values in layers.items()}


def test_scan_alerts_at_the_evaluation_recovery_is_confirmed() -> None:
    # on the prefix ending at step 1000 the smoothed value there is (3 + 5) / 2 = 4 >= 3.7, one evaluation only
    assert scan_alerts(*prefix(11)) == []
    raised = scan_alerts(*prefix(12))
    assert core(raised) == EXPECTED[:2]
    assert (raised[0].peak, raised[0].trough, raised[1].layers) == (10.0, 3.0, ("blocks.0",))  # the evidence
    # given what was raised, nothing is raised again
    assert scan_alerts(*prefix(13), raised=raised) == []
    # a later layer alert comes without a second run alert
    assert core(scan_alerts(*prefix(15), raised=raised)) == EXPECTED[2:]
    assert scan_alerts([], [], {}) == []


def test_scan_alerts_run_alert_is_the_first_layer_s() -> None:
    both = {"x": PRECURSOR_RANKME, "y": PRECURSOR_RANKME}
    alerts = scan_alerts(*prefix(12, both))
    assert core(alerts) == [
        ("layer", "x", 1100, 800, 3.0, 1100),
        ("layer", "y", 1100, 800, 3.0, 1100),
        ("run", "x", 1100, 800, 3.0, 1100),
    ]
    assert alerts[2].layers == ("x", "y")


def test_scan_alerts_deepest_layer_and_layers_required() -> None:
    both = {"x": PRECURSOR_RANKME, "y": LATE_RANKME}
    # only the deepest (last) layer may alert: y's later collapse
    deepest = replayed(STEPS, PRECURSOR_ACC, both, DetectionSettings(alert_layers="deepest"))
    assert core(deepest) == [("layer", "y", 1400, 1100, 3.0, 1400), ("run", "y", 1400, 1100, 3.0, 1400)]
    # two layers required: the run alert waits for the second layer, and names both
    two = replayed(STEPS, PRECURSOR_ACC, both, DetectionSettings(layers_required=2))
    assert core(two) == [("layer", "x", 1100, 800, 3.0, 1100), ("layer", "y", 1400, 1100, 3.0, 1400),
                         ("run", "x", 1400, 800, 3.0, 1100)]
    assert two[-1].layers == ("x", "y")


def test_scan_alerts_uses_the_settings() -> None:
    # three confirming evaluations: recovery confirmed at 1200
    assert scan_alerts(*prefix(12), settings=DetectionSettings(recovery_evals=3)) == []
    assert core(scan_alerts(*prefix(13), settings=DetectionSettings(recovery_evals=3)))[0] == (
        "layer", "blocks.0", 1200, 800, 3.0, 1200)
    # threshold 0.1, patience 2: acquisition (0.1, 0.2 at 1300, 1400) is confirmed at step 1400, the
    # evaluation at which blocks.1 would alert: it does not
    assert core(replayed(STEPS, PRECURSOR_ACC, LAYERS, DetectionSettings(threshold=0.1, patience=2))) == (
        EXPECTED[:2])
    assert core(replayed(STEPS, PRECURSOR_ACC, LAYERS, DetectionSettings(threshold=0.1, patience=3))) == (
        EXPECTED)
    assert replayed(STEPS, [1.0] * 20, LAYERS, DetectionSettings(patience=1)) == []


def test_no_alert_once_acquired() -> None:
    assert replayed(STEPS, SIMULTANEOUS_ACC, {"a": SIMULTANEOUS_RANKME}) == []
    # a precursor-shaped layer, but acquisition (patience 3) is confirmed at step 1000, before recovery at 1100
    acc = [0.0] * 8 + [0.6] * 12
    assert detect_acquisition(STEPS[:11], acc[:11]) == 800
    assert replayed(STEPS, acc, {"a": PRECURSOR_RANKME}) == []
    assert scan_alerts(STEPS, acc, {"a": PRECURSOR_RANKME}) == []


def test_replay_equals_feeding_the_tracker() -> None:
    tracker = RunTracker()
    assert core(feed(tracker, STEPS, PRECURSOR_ACC, LAYERS)) == EXPECTED
    assert feed(RunTracker(), STEPS, PRECURSOR_ACC, LAYERS) == replayed(STEPS, PRECURSOR_ACC, LAYERS)


@pytest.mark.parametrize("cut", [5, 10, 11, 12, 14])
def test_resuming_from_saved_alerts_repeats_nothing_and_loses_nothing(cut: int) -> None:
    before = replayed(*prefix(cut))
    stored = json.loads(json.dumps([asdict(a) for a in before]))
    saved = [alert_from_record(alert) for alert in stored]
    after: list[Alert] = []
    for end in range(cut + 1, len(STEPS) + 1):
        after += scan_alerts(*prefix(end), raised=saved + after)
    assert core(before + after) == EXPECTED


# --- properties over random series ----------------------------------------------------------------

LOW_ACC = st.sampled_from([0.0, 0.2, 0.4, 0.49, math.nan])
HIGH_ACC = st.sampled_from([0.5, 0.7, 1.0, 1.0, 0.2])  # mostly above the threshold, with the odd dip
# few distinct levels, so that drops of a quarter or more and recoveries are common
RANKME_VALUES = st.one_of(st.sampled_from([1.0, 3.0, 5.0, 10.0, 10.0, 20.0]), st.floats(0.0, 30.0),
                          st.just(math.nan))


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[int], list[float], dict[str, list[float]], DetectionSettings]:
    """Increasing steps, accuracy low then (from a random evaluation, maybe never) mostly high, 1 to 3 layers."""
    n = draw(st.integers(1, 30))
    gaps = draw(st.lists(st.integers(1, 50), min_size=n, max_size=n))
    steps = [sum(gaps[: i + 1]) for i in range(n)]
    onset = draw(st.integers(0, n + 5))
    acc = [draw(LOW_ACC if i < onset else HIGH_ACC) for i in range(n)]
    layers = {f"blocks.{k}": draw(st.lists(RANKME_VALUES, min_size=n, max_size=n))
              for k in range(draw(st.integers(1, 3)))}
    detection = DetectionSettings(
        patience=draw(st.integers(1, 4)), recovery_evals=draw(st.integers(1, 3)),
        smoothing=draw(st.sampled_from([1, 3, 5])), min_drop=draw(st.sampled_from([0.1, 0.25, 0.5])),
        recovery_fraction=draw(st.sampled_from([0.1, 0.5, 1.0])))
    return steps, acc, layers, detection


@settings(max_examples=150, deadline=None)
@given(runs())
def test_replayed_alerts_properties(run: tuple[list[int], list[float], dict[str, list[float]], DetectionSettings]
                                  ) -> None:
    steps, acc, layers, detection = run
    alerts = replayed(steps, acc, layers, detection)
    # the same alerts, in the same order, as feeding the evaluations one at a time
    tracker = RunTracker(settings=detection)
    assert feed(tracker, steps, acc, layers) == alerts
    assert tracker.alerts == alerts
    # none once acquisition is confirmed
    acquired = detect_acquisition(steps, acc, detection.threshold, detection.patience)
    if acquired is not None:
        confirmed_at = steps[steps.index(acquired) + detection.patience - 1]
        assert all(alert.step < confirmed_at for alert in alerts)
    # each layer alerts at most once; a run alert exactly when a layer alerts, right after the layer alerts
    # of that evaluation, and a copy of the first of them
    layer_alerts = [alert for alert in alerts if alert.kind == "layer"]
    assert len({alert.layer for alert in layer_alerts}) == len(layer_alerts)
    run_alerts = [i for i, alert in enumerate(alerts) if alert.kind == "run"]
    assert len(run_alerts) == (1 if layer_alerts else 0)
    if layer_alerts:
        first = layer_alerts[0]
        i = run_alerts[0]
        assert core([alerts[i]]) == core([replace(first, kind="run")])
        assert alerts[i].layers == tuple(a.layer for a in layer_alerts if a.step == first.step)
        assert [a.step for a in alerts[:i]] == [first.step] * i
        assert all(a.step > first.step for a in alerts[i + 1:])
    # each layer alert is the collapse confirmed on the series up to its evaluation
    for alert in layer_alerts:
        end = steps.index(alert.step) + 1
        collapse = detect_collapse(steps[:end], layers[alert.layer][:end], detection)
        assert collapse is not None
        assert (collapse.step, collapse.floor, collapse.recovery_step) == (
            alert.collapse_step, alert.floor, alert.recovery_step)
        assert alert.collapse_step < alert.recovery_step <= alert.step
        earlier = detect_collapse(steps[:end - 1], layers[alert.layer][:end - 1], detection) if end > 1 else None
        assert earlier is None or earlier.recovery_step is None  # the first evaluation it was confirmed
