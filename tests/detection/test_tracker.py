"""PrecursorTracker: alerts as evaluations arrive, missing values, repeated steps, results."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from capgeo_callbacks.detection import (
    DetectionSettings,
    PrecursorTracker,
    detect_run,
    replay_alerts,
)
from tests.detection.conftest import (
    LATE_RANKME,
    PRECURSOR_ACC,
    PRECURSOR_RANKME,
    SIMULTANEOUS_ACC,
    SIMULTANEOUS_RANKME,
    STEPS,
    core,
    feed,
    points,
)


def same(a: list[float], b: list[float]) -> bool:
    """Equal lists, NaN equal to NaN."""
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True))


def test_tracker_raises_each_alert_once() -> None:
    tracker = PrecursorTracker()
    alerts = feed(tracker, STEPS, PRECURSOR_ACC, {"blocks.0": PRECURSOR_RANKME, "blocks.1": LATE_RANKME})
    assert core(alerts) == [
        ("layer", "blocks.0", 1100, 800, 3.0, 1100),
        ("run", "blocks.0", 1100, 800, 3.0, 1100),
        ("layer", "blocks.1", 1400, 1100, 3.0, 1400),
    ]
    assert tracker.alerts == alerts
    assert tracker.acquired_step == 1500
    assert tracker.update(2000, 1.0, {"blocks.0": 1.0, "blocks.1": 1.0}) == []  # acquired: no new alerts
    assert tracker.alerts == alerts
    results = tracker.results()
    json.dumps(results, allow_nan=False)
    assert (results["verdict"], results["gap"], results["verdict_layer"]) == ("precursor", 700, "blocks.0")
    assert results["acquisition_step"] == 1500
    assert results["layers"]["blocks.1"]["verdict"] == "precursor"
    assert results["layers"]["blocks.1"]["gap"] == 400
    assert results["layers"]["blocks.0"]["recovery_step"] == 1100
    assert results["layer_order_rho"] == pytest.approx(1.0)  # depth = order of first appearance
    assert results["settings"] == DetectionSettings().to_dict()
    assert tracker.steps == [*STEPS, 2000] and tracker.acc == [*PRECURSOR_ACC, 1.0]
    assert tracker.rankme["blocks.0"][:2] == [10.0, 10.0] and len(tracker.rankme["blocks.0"]) == 21


def test_tracker_no_alert_when_acquired_first() -> None:
    tracker = PrecursorTracker()
    assert feed(tracker, STEPS, SIMULTANEOUS_ACC, {"a": SIMULTANEOUS_RANKME}) == []
    assert tracker.results()["verdict"] == "simultaneous"
    assert tracker.results()["gap"] == -100


def test_noise_around_a_constant_gives_no_alert() -> None:
    rng = np.random.default_rng(1234)
    n = 80
    rankme = list(50 + 2.0 * rng.standard_normal(n))
    acc = [min(1.0, 0.02 * i) for i in range(n)]
    steps = [10 * i for i in range(n)]
    tracker = PrecursorTracker()
    assert feed(tracker, steps, acc, {"blocks.0": rankme, "blocks.1": rankme[::-1]}) == []
    assert tracker.acquired_step == 250
    results = tracker.results()
    assert results["verdict"] == "no-collapse" and results["gap"] is None and results["verdict_layer"] is None
    assert results["layers"]["blocks.0"]["collapse_step"] is None


def test_tracker_uses_its_settings() -> None:
    layers = {"blocks.0": PRECURSOR_RANKME, "blocks.1": LATE_RANKME}
    tracker = PrecursorTracker(DetectionSettings(threshold=0.1, patience=2))
    assert core(feed(tracker, STEPS, PRECURSOR_ACC, layers)) == [
        ("layer", "blocks.0", 1100, 800, 3.0, 1100), ("run", "blocks.0", 1100, 800, 3.0, 1100)]
    assert tracker.acquired_step == 1300
    assert tracker.results()["settings"]["threshold"] == 0.1
    slow = PrecursorTracker(DetectionSettings(recovery_evals=3))
    assert core(feed(slow, STEPS, PRECURSOR_ACC, layers))[0] == ("layer", "blocks.0", 1200, 800, 3.0, 1200)


def test_tracker_equals_replay_and_detect_run() -> None:
    layers = {"blocks.0": PRECURSOR_RANKME, "blocks.1": LATE_RANKME, "blocks.2": SIMULTANEOUS_RANKME}
    tracker = PrecursorTracker()
    alerts = feed(tracker, STEPS, PRECURSOR_ACC, layers)
    assert alerts == replay_alerts(STEPS, PRECURSOR_ACC, layers)
    assert tracker.results() == detect_run(points(STEPS, PRECURSOR_ACC),
                                           {name: points(STEPS, values) for name, values in layers.items()})


def test_fresh_tracker() -> None:
    tracker = PrecursorTracker()
    assert tracker.steps == [] and tracker.alerts == [] and tracker.acquired_step is None
    assert tracker.rankme == {} and tracker.settings == DetectionSettings()
    results = tracker.results()
    assert (results["verdict"], results["acquisition_step"], results["layers"]) == ("not-acquired", None, {})


def test_tracker_missing_values_and_repeated_steps() -> None:
    tracker = PrecursorTracker()
    tracker.update(0, 0.0, {"a": 5.0})
    tracker.update(10, math.nan, {"b": 4.0})  # "a" skipped, "b" new, accuracy missing
    tracker.update(20, 0.1, {"a": math.nan, "b": 4.5})
    assert tracker.steps == [0, 10, 20]
    assert same(tracker.acc, [0.0, math.nan, 0.1])
    assert list(tracker.rankme) == ["a", "b"]
    assert same(tracker.rankme["a"], [5.0, math.nan, math.nan])
    assert same(tracker.rankme["b"], [math.nan, 4.0, 4.5])
    tracker.update(30, 0.1, {"a": math.inf})  # Inf is a skipped measurement too
    assert math.isnan(tracker.rankme["a"][3])
    tracker.update(20, 0.2, {"a": 6.0, "b": 4.4})  # the same step again replaces that evaluation
    assert tracker.steps == [0, 10, 20] and tracker.acc[2] == 0.2 and tracker.rankme["b"][2] == 4.4
    tracker.update(15, 0.3, {"a": 6.5})  # an earlier step drops what came after it
    assert tracker.steps == [0, 10, 15] and tracker.acc[2] == 0.3
    assert same(tracker.rankme["a"], [5.0, math.nan, 6.5])
    assert same(tracker.rankme["b"], [math.nan, 4.0, math.nan])


def test_repeated_steps_keep_the_alerts_raised() -> None:
    tracker = PrecursorTracker()
    raised = feed(tracker, STEPS[:12], PRECURSOR_ACC[:12], {"a": PRECURSOR_RANKME[:12]})
    assert [alert.kind for alert in raised] == ["layer", "run"]
    assert tracker.update(1100, 0.0, {"a": 7.0}) == []  # the evaluation again: nothing raised twice
    assert tracker.update(500, 0.0, {"a": 8.0}) == []
    assert tracker.steps == [0, 100, 200, 300, 400, 500] and tracker.alerts == raised


def test_bad_input_raises() -> None:
    with pytest.raises(ValueError, match="DetectionSettings"):
        PrecursorTracker({"window": 3})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        PrecursorTracker(threshold=0.5)  # type: ignore[call-arg]  # the old keyword API
    tracker = PrecursorTracker()
    with pytest.raises(ValueError, match="integer"):
        tracker.update(1.5, 0.1, {"a": 1.0})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="acc must be a real number"):
        tracker.update(0, "high", {"a": 1.0})  # type: ignore[arg-type]
    assert tracker.steps == []  # nothing recorded from the rejected calls


def test_a_rejected_rankme_value_leaves_the_tracker_usable() -> None:
    tracker = PrecursorTracker()
    tracker.update(0, 0.1, {"a": 1.0, "b": 2.0})
    with pytest.raises(ValueError, match=r"rankme\['b'\] must be a real number"):
        tracker.update(10, 0.1, {"a": 1.0, "b": "x"})  # type: ignore[dict-item]
    assert tracker.steps == [0]
    tracker.update(20, 0.1, {"a": 1.0, "b": 2.0})
    assert tracker.steps == [0, 20]


def test_a_non_string_layer_name_is_not_silently_dropped() -> None:
    tracker = PrecursorTracker()
    try:
        tracker.update(0, 0.1, {0: 5.0})  # type: ignore[dict-item]
    except ValueError:
        return  # rejecting it is fine
    assert tracker.rankme == {"0": [5.0]}


def test_results_agree_with_acquired_step_when_accuracy_is_missing() -> None:
    tracker = PrecursorTracker()
    for i, acc in enumerate([0.9, math.nan, 0.9, 0.9]):
        tracker.update(10 * i, acc, {"a": 5.0})
    assert tracker.acquired_step is None
    assert tracker.results()["acquisition_step"] == tracker.acquired_step
