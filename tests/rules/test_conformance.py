"""The one conformance test every registered rule and forecaster passes (as scikit-learn's ``check_estimator``):
live equals replay, each alert once and of its own rule, every forecast of a later step with an ordered interval
and none once acquisition is confirmed, needs declared and honoured, settings that rebuild the rule; forecasters
also follow the estimator convention (``get_params`` round-trips, ``fit`` an instance method setting ``_`` state).
Fitted forecasters are checked unfitted and fitted on scripted calibration runs."""

from __future__ import annotations

import inspect
import json
import math

import pytest

from capgeo_callbacks.keys import ACC
from capgeo_callbacks.rules import RULES, ForecastRule, Needs, Rule, make_rule, replay
from capgeo_callbacks.run.tracker import RunTracker
from tests.detection.conftest import PRECURSOR_ACC, STEPS
from tests.rules.conftest import CONFIRMED, INFO, calibration_runs, live, ordered, scripted_view


def fitted(name: str) -> Rule:
    """The rule registered as ``name``, fitted on the calibration runs where it learns from them."""
    rule = make_rule(name)
    if isinstance(rule, ForecastRule) and type(rule).fit is not ForecastRule.fit:
        assert rule.fit(calibration_runs()) is rule
    return rule


LEARNING = sorted(name for name in RULES if isinstance(make_rule(name), ForecastRule)
                  and type(make_rule(name)).fit is not ForecastRule.fit)
CASES = [(name, False) for name in sorted(RULES)] + [(name, True) for name in LEARNING]


@pytest.mark.parametrize(("name", "fit"), CASES, ids=[f"{n}{'-fitted' if f else ''}" for n, f in CASES])
def test_every_rule_conforms(name: str, fit: bool) -> None:
    build = (lambda: fitted(name)) if fit else (lambda: make_rule(name))
    rule = build()
    assert isinstance(rule, Rule) and rule.name and isinstance(rule.needs, Needs)
    view = scripted_view()
    assert not rule.needs.missing(view.series, INFO), "the scripted run holds every input a registered rule reads"
    alerts, forecasts = replay(rule, view)
    assert live(build()) == (alerts, forecasts)  # live equals replay
    assert all(alert.rule == rule.name for alert in alerts)
    assert len({(alert.kind, alert.layer) for alert in alerts}) == len(alerts)  # each alert once
    assert all(forecast.rule == rule.name and forecast.step in STEPS for forecast in forecasts)
    assert all(ordered(forecast) for forecast in forecasts)
    assert all(forecast.step < CONFIRMED for forecast in forecasts)  # none once acquisition is confirmed
    settings = json.loads(json.dumps(rule.settings(), allow_nan=False))
    rebuilt = type(rule).from_settings(settings)
    assert rebuilt.settings() == rule.settings() and rebuilt.name == rule.name
    assert replay(rebuilt, view) == (alerts, forecasts)  # the frozen settings say the same


@pytest.mark.parametrize("name", sorted(RULES))
def test_a_rule_without_its_inputs_is_left_out(name: str) -> None:
    """With no measured series, no scalar but accuracy and no run facts, a rule that needs more is left out at the
    first evaluation, named with what it lacks, and emits nothing."""
    rule = make_rule(name)
    tracker = RunTracker([rule])
    first = tracker.update(STEPS[0], PRECURSOR_ACC[0])
    missing = rule.needs.missing({ACC: ()}, {})
    assert first.left_out == ({rule.name: missing} if missing else {})
    for step, acc in zip(STEPS[1:], PRECURSOR_ACC[1:], strict=True):
        tracker.update(step, acc)
    if missing:
        assert tracker.alerts == [] and tracker.forecasts == {}
        assert tracker.summary()["rules_left_out"] == {rule.name: missing}


@pytest.mark.parametrize("name", sorted(name for name in RULES if isinstance(make_rule(name), ForecastRule)))
def test_forecasters_follow_the_estimator_convention(name: str) -> None:
    forecaster = make_rule(name)
    params = forecaster.get_params()
    assert set(params) == set(inspect.signature(type(forecaster).__init__).parameters) - {"self"}
    assert type(forecaster)(**params).get_params() == params  # get_params round-trips
    assert not isinstance(inspect.getattr_static(type(forecaster), "fit"), (classmethod, staticmethod))
    learned = [key for key in vars(fitted(name)) if key.endswith("_")]
    assert {key[:-1] for key in learned} == set(type(forecaster).fitted)  # fitted state: named with a trailing _
    assert not [key for key in vars(forecaster) if key.endswith("_")]  # ... and set by fit only
    assert not set(type(forecaster).fitted) & set(params)  # fitted state is not a constructor argument


def test_fitted_forecasters_learn_from_the_calibration_runs() -> None:
    clock = fitted("clock")
    assert clock.table_ == {"scripted/easy": [1700.0, 1500.0, 1300.0]}
    forecast = replay(clock, scripted_view())[1][0]
    assert (forecast.predicted, forecast.low, forecast.high) == (1500.0, 1300.0, 1700.0)
    ridge = fitted("ridge")
    assert len(ridge.weights_) == 6 and ridge.scale_ >= 0 and ridge.clock_.table_ == clock.table_
    made = replay(ridge, scripted_view())[1]
    assert made and all(math.isfinite(f.predicted) for f in made)
