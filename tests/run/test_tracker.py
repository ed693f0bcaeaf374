"""The live tracker and the rule protocol: every registered rule says live what it says replayed offline,
raises each alert once, and the tracker's summary has the same keys whoever feeds it."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import pytest

from capgeo_callbacks.detection import Alert, Chance, DetectionSettings, replay_alerts
from capgeo_callbacks.rules import RULES, Forecast, Rule, RuleOutput, RunView, make_rule, register_rule, replay
from capgeo_callbacks.run.summary import read_summary
from capgeo_callbacks.run.tracker import RunTracker, forecast_from_record, forecast_record
from tests.detection.conftest import LATE_RANKME, PRECURSOR_ACC, PRECURSOR_RANKME, STEPS, core, feed, points

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


@pytest.mark.parametrize("name", sorted(RULES))
def test_every_rule_conforms(name: str) -> None:
    """The conformance check every rule passes: live equals replay, alerts once, JSON-able settings."""
    rule = make_rule(name)
    assert isinstance(rule, Rule) and rule.name
    measured, scalars = scripted_run()
    view = RunView.from_points(points(STEPS, PRECURSOR_ACC), {**measured, **scalars}, INFO)
    assert live(make_rule(name)) == replay(rule, view)
    alerts, forecasts = replay(rule, view)
    assert all(alert.rule == rule.name for alert in alerts)
    assert len({(alert.kind, alert.layer) for alert in alerts}) == len(alerts)  # each alert once
    assert all(f.step in STEPS and f.rule == rule.name for f in forecasts)
    json.dumps(rule.settings(), allow_nan=False)


def test_the_baselines_on_the_scripted_run() -> None:
    measured, scalars = scripted_run()
    view = RunView.from_points(points(STEPS, PRECURSOR_ACC), {**measured, **scalars}, INFO)
    first = {name: next((a.step for a in replay(make_rule(name), view)[0] if a.kind == "run"), None)
             for name in ("study", "loss-onset", "logprob-emergence", "probe-crossing", "warmup-end", "clock-20")}
    # study: blocks.0 recovers at 1100; loss onset: log-prob above -2 + 0.05 from 600, confirmed at 700;
    # log-prob reaches log(0.5) = -0.69 at 1200; the probe 0.2 + 0.5 x 0.8 = 0.6 at 600; warm-up end at 100;
    # 20% of 1,900 steps at 400
    assert first == {"study": 1100, "loss-onset": 700, "logprob-emergence": 1200, "probe-crossing": 600,
                     "warmup-end": 100, "clock-20": 400}


def test_the_study_rule_in_the_tracker_equals_replay_alerts() -> None:
    tracker = RunTracker()
    layers = {"blocks.0": PRECURSOR_RANKME, "blocks.1": LATE_RANKME}
    alerts = feed(tracker, STEPS, PRECURSOR_ACC, layers)
    assert alerts == replay_alerts(STEPS, PRECURSOR_ACC, layers)
    assert core(alerts) == [("layer", "blocks.0", 1100, 800, 3.0, 1100), ("run", "blocks.0", 1100, 800, 3.0, 1100),
                            ("layer", "blocks.1", 1400, 1100, 3.0, 1400)]
    assert tracker.acquired_step == 1500
    assert tracker.update(1900, 1.0).alerts == []  # a step already recorded: ignored


class AccuracyAbove(Rule):
    """An example rule in a dozen lines: warns once when accuracy first reaches ``level``."""

    name = "acc-above"

    def __init__(self, level: float = 0.15) -> None:
        self.level = level

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        if not raised and run.last("acc") >= self.level:
            return RuleOutput(alerts=[self.alert(run, f"accuracy reached {self.level}")])
        return RuleOutput()

    def settings(self) -> dict:
        return {"level": self.level}


class HalfwayClock(Rule):
    """An example forecaster: predicts acquisition at 60% of the budget, with an interval."""

    name = "halfway-clock"

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        budget = run.max_steps or math.inf
        return RuleOutput(forecast=Forecast(self.name, run.step, 0.6 * budget, 0.4 * budget, 0.8 * budget))


def test_a_user_rule_and_forecaster_plug_in(tmp_path) -> None:
    register_rule("acc-above", AccuracyAbove)
    try:
        assert live(make_rule("acc-above"))[0][0].step == 1400
    finally:
        del RULES["acc-above"]
    tracker = RunTracker([HalfwayClock(), AccuracyAbove()], run_info=INFO)
    for step, acc in zip(STEPS, PRECURSOR_ACC, strict=True):
        update = tracker.update(step, acc)
        assert [f.predicted for f in update.forecasts] == [1140.0]
    summary = tracker.summary()
    assert summary["rules"] == {"halfway-clock": {}, "acc-above": {"level": 0.15}}
    assert len(summary["forecasts"]["halfway-clock"]) == 20
    assert summary["forecasts"]["halfway-clock"][0] == {"step": 0, "predicted": 1140.0, "beyond": False,
                                                       "low": 760.0, "high": 1520.0}
    assert [a["message"] for a in summary["alerts"]] == ["capgeo acc-above alert at step 1400: accuracy reached 0.15"]


def test_forecasts_beyond_reach_round_trip_through_json() -> None:
    beyond = Forecast("f", 10, math.inf, 500.0, math.inf)
    record = json.loads(json.dumps(forecast_record(beyond), allow_nan=False))
    assert record == {"step": 10, "predicted": None, "beyond": True, "low": 500.0, "high": None}
    assert forecast_from_record("f", record) == beyond
    assert beyond.within(10 ** 9) is False and Forecast("f", 10, 300.0).within(290) is True


def test_state_round_trip_and_summary_keys(tmp_path) -> None:
    tracker = RunTracker([make_rule("study"), make_rule("loss-onset"), HalfwayClock()], run_info=INFO)
    measured, scalars = scripted_run()
    for i, step in enumerate(STEPS[:12]):
        tracker.update(step, PRECURSOR_ACC[i], {"val/logprob": LOGPROB[i]},
                       {tag: values[: i + 1] for tag, values in measured.items()})
    state = json.loads(json.dumps(tracker.state_dict()))  # a checkpoint pickles it; JSON is the harder test
    resumed = RunTracker([make_rule("study"), make_rule("loss-onset"), HalfwayClock()], run_info=INFO)
    resumed.load_state_dict(state)
    for tracked in (tracker, resumed):
        for i in range(12, 20):
            tracked.update(STEPS[i], PRECURSOR_ACC[i], {"val/logprob": LOGPROB[i]},
                           {tag: values[: i + 1] for tag, values in measured.items()})
    assert resumed.alerts == tracker.alerts and resumed.forecasts == tracker.forecasts
    summary = tracker.summary(measured)
    assert summary == resumed.summary(measured)
    assert [a.rule for a in tracker.alerts] == ["loss-onset", "study", "study", "study"]
    assert summary["series"]["val/logprob"] == points(STEPS, LOGPROB)
    assert summary["labels"]["acquisition_step"] == 1500


def test_bad_tracker_input() -> None:
    with pytest.raises(ValueError, match="DetectionSettings"):
        RunTracker(settings={"window": 3})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Rule objects"):
        RunTracker(["study"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="unique"):
        RunTracker([make_rule("study"), make_rule("study")])
    with pytest.raises(ValueError, match="unknown rule 'nope'; known rules: study"):
        make_rule("nope")
    tracker = RunTracker()
    with pytest.raises(ValueError, match="integer"):
        tracker.update(1.5, 0.1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="acc must be a real number"):
        tracker.update(0, "high")  # type: ignore[arg-type]
    assert tracker.steps == []


def test_a_committed_corpus_run_replays_through_the_tracker() -> None:
    """Offline: a finished run fed again evaluation by evaluation gives the summary's own alerts."""
    summary = read_summary("corpus/hard/sort-hard-xs-s0.json.gz")
    series = summary["series"]
    tracker = RunTracker(settings=DetectionSettings.from_dict(summary["settings"]), run_info=summary)
    measured = {tag: points_ for tag, points_ in series.items() if tag.startswith(("rankme/", "probe_acc/"))}
    for i, (step, acc) in enumerate(series["acc"]):
        tracker.update(step, acc, measured={tag: [p for p in pts if p[0] <= step] for tag, pts in measured.items()})
        assert i < len(series["acc"])
    assert [a["step"] for a in summary["alerts"]] == [a.step for a in tracker.alerts]


@pytest.mark.parametrize("name", sorted(RULES))
def test_every_rule_rebuilds_from_its_settings(name: str) -> None:
    """What a registration file freezes is enough to rebuild the same rule."""
    rule = make_rule(name)
    settings = json.loads(json.dumps(rule.settings()))
    rebuilt = type(rule).from_settings(settings)
    assert rebuilt.settings() == rule.settings() and rebuilt.name == rule.name


def test_default_rules_are_the_registered_choice() -> None:
    """The library's recommended rules are the warning and forecaster frozen in the study's registration."""
    from pathlib import Path

    from capgeo_callbacks.rules import default_rules

    registration = json.loads((Path(__file__).resolve().parents[2] / "study" / "registration.json").read_text())
    rules = {rule.name: rule for rule in default_rules()}
    for role in ("warning", "forecaster"):
        entry = registration[role]
        assert entry["name"] in rules and rules[entry["name"]].settings() == entry["settings"]
    assert "study" in rules
