"""The live tracker and the rule protocol: every registered rule says live what it says replayed offline,
raises each alert once, and the tracker's summary has the same keys whoever feeds it."""

from __future__ import annotations

import json
import math

import pytest

from capgeo_callbacks.detection import Alert, Chance, DetectionSettings
from capgeo_callbacks.rules import Forecast, Rule, make_rule
from capgeo_callbacks.run.summary import read_summary
from capgeo_callbacks.run.tracker import RunTracker, forecast_from_record, forecast_record
from tests.detection.conftest import LATE_RANKME, PRECURSOR_ACC, PRECURSOR_RANKME, STEPS, core, feed, points, replayed
from tests.rules.test_rules import HalfwayClock

CHANCE = Chance(exact=0.01, token_acc=0.2, logprob=-2.0, logprob_sd=0.5, questions=512, tokens=2048)
INFO = {"task": "scripted", "max_steps": 1900, "warmup_steps": 100, "chance": CHANCE.to_dict()}
LOGPROB = [-3.0, -2.2, -2.0, -2.0, -1.99, -2.0, -1.8, -1.6, -1.2, -1.0, -0.9, -0.8, -0.6, -0.5, -0.4, -0.3, -0.2,
           -0.15, -0.1, -0.05]
PROBE = [0.1] * 6 + [0.7] * 14


def scripted_run() -> tuple[dict[str, list[list[float]]], dict[str, list[list[float]]]]:
    """(measured, scalars) of the scripted precursor run, as series of points."""
    measured = {"rankme/blocks.0": points(STEPS, PRECURSOR_RANKME), "rankme/blocks.1": points(STEPS, LATE_RANKME),
                "probe_acc/blocks.1": points(STEPS, PROBE)}
    return measured, {"val/logprob": points(STEPS, LOGPROB)}


def live(rule: Rule) -> tuple[list[Alert], list[Forecast]]:
    """What ``rule`` emits fed one evaluation at a time through a tracker."""
    measured, scalars = scripted_run()
    tracker = RunTracker([rule], run_info=INFO)
    for i, step in enumerate(STEPS):
        so_far = {tag: values[: i + 1] for tag, values in measured.items()}
        tracker.update(step, PRECURSOR_ACC[i], {tag: values[i][1] for tag, values in scalars.items()}, so_far)
    return tracker.alerts, tracker.forecasts.get(rule.name, [])


def test_the_study_rule_in_the_tracker_equals_replay_alerts() -> None:
    tracker = RunTracker()
    layers = {"blocks.0": PRECURSOR_RANKME, "blocks.1": LATE_RANKME}
    alerts = feed(tracker, STEPS, PRECURSOR_ACC, layers)
    assert alerts == replayed(STEPS, PRECURSOR_ACC, layers)
    assert core(alerts) == [("layer", "blocks.0", 1100, 800, 3.0, 1100), ("run", "blocks.0", 1100, 800, 3.0, 1100),
                            ("layer", "blocks.1", 1400, 1100, 3.0, 1400)]
    assert tracker.latest.acquired_step == 1500  # computed once, in the view of the latest evaluation
    assert tracker.update(1900, 1.0).alerts == []  # a step already recorded: ignored


def test_forecasts_beyond_reach_round_trip_through_json() -> None:
    beyond = Forecast("f", 10, math.inf, 500.0, math.inf)
    record = json.loads(json.dumps(forecast_record(beyond), allow_nan=False))
    assert record == {"step": 10, "predicted": None, "beyond": True, "low": 500.0, "high": None}
    assert forecast_from_record("f", record) == beyond
    assert beyond.within(10 ** 9) is False and Forecast("f", 10, 300.0).within(290) is True


def test_state_round_trip_and_summary_keys(tmp_path) -> None:
    tracker = RunTracker([make_rule("rankme-recovery"), make_rule("loss-onset"), HalfwayClock()], run_info=INFO)
    measured, scalars = scripted_run()
    for i, step in enumerate(STEPS[:12]):
        tracker.update(step, PRECURSOR_ACC[i], {"val/logprob": LOGPROB[i]},
                       {tag: values[: i + 1] for tag, values in measured.items()})
    state = json.loads(json.dumps(tracker.state_dict()))  # a checkpoint pickles it; JSON is the harder test
    resumed = RunTracker([make_rule("rankme-recovery"), make_rule("loss-onset"), HalfwayClock()], run_info=INFO)
    resumed.load_state_dict(state)
    for tracked in (tracker, resumed):
        for i in range(12, 20):
            tracked.update(STEPS[i], PRECURSOR_ACC[i], {"val/logprob": LOGPROB[i]},
                           {tag: values[: i + 1] for tag, values in measured.items()})
    assert resumed.alerts == tracker.alerts and resumed.forecasts == tracker.forecasts
    summary = tracker.summary(measured)
    assert summary == resumed.summary(measured)
    assert [a.rule for a in tracker.alerts] == ["loss-onset", "rankme-recovery", "rankme-recovery", "rankme-recovery"]
    assert summary["series"]["val/logprob"] == points(STEPS, LOGPROB)
    assert summary["labels"]["acquisition_step"] == 1500


def test_bad_tracker_input() -> None:
    with pytest.raises(ValueError, match="DetectionSettings"):
        RunTracker(settings={"window": 3})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Rule objects"):
        RunTracker(["rankme-recovery"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="unique"):
        RunTracker([make_rule("rankme-recovery"), make_rule("rankme-recovery")])
    with pytest.raises(ValueError, match="unknown rule 'nope'; known rules: rankme-recovery"):
        make_rule("nope")
    tracker = RunTracker()
    with pytest.raises(ValueError, match="integer"):
        tracker.update(1.5, 0.1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="acc must be a real number"):
        tracker.update(0, "high")  # type: ignore[arg-type]
    assert tracker.steps == []


def test_a_committed_corpus_run_replays_through_the_tracker() -> None:
    """Offline: a finished run fed again evaluation by evaluation gives the summary's own alerts."""
    summary = read_summary("study/corpus/hard/sort-hard-xs-s0.json.gz")
    series = summary["series"]
    tracker = RunTracker(settings=DetectionSettings.from_dict(summary["settings"]), run_info=summary)
    measured = {tag: points_ for tag, points_ in series.items() if tag.startswith(("rankme/", "probe_acc/"))}
    for i, (step, acc) in enumerate(series["acc"]):
        tracker.update(step, acc, measured={tag: [p for p in pts if p[0] <= step] for tag, pts in measured.items()})
        assert i < len(series["acc"])
    assert [a["step"] for a in summary["alerts"]] == [a.step for a in tracker.alerts]


