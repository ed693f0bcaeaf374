"""Forecasts that mean something, enforced where every rule is asked (``rule_output``): a forecast always names a
step after the one it is made at, with its interval ordered around it, and none is recorded once acquisition is
confirmed, whatever the forecaster returns; live (the tracker) and replayed alike."""

from __future__ import annotations

import math
from collections.abc import Sequence

from capgeo_callbacks.detection import Alert
from capgeo_callbacks.rules import Forecast, Rule, RuleOutput, RunView, replay
from capgeo_callbacks.run.tracker import RunTracker
from tests.detection.conftest import PRECURSOR_ACC, STEPS
from tests.rules.conftest import CONFIRMED, ordered, scripted_view


class Careless(Rule):
    """A forecaster that says what it likes: the past, the present, inverted intervals, and after acquisition."""

    name = "careless"

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        cases = [(run.step - 50, run.step - 40, run.step - 60),  # the past, interval inverted
                 (run.step, run.step, run.step),  # now
                 (run.step + 300, run.step + 400, run.step + 200),  # the future, interval inverted
                 (math.inf, run.step - 10, math.inf)]  # beyond reach, low in the past
        predicted, low, high = cases[len(run.steps) % len(cases)]
        return RuleOutput(forecast=Forecast(self.name, run.step, predicted, low, high))


def test_forecasts_are_of_later_steps_ordered_and_stop_at_acquisition() -> None:
    tracker = RunTracker([Careless()])
    for step, acc in zip(STEPS, PRECURSOR_ACC, strict=True):
        tracker.update(step, acc)
    made = tracker.forecasts["careless"]
    assert [f.step for f in made] == [s for s in STEPS if s < CONFIRMED]  # none once acquisition is confirmed
    assert all(ordered(f) for f in made)
    assert made == replay(Careless(), scripted_view())[1]  # the same rule replayed
    by_step = {f.step: f for f in made}
    assert (by_step[0].predicted, by_step[0].low, by_step[0].high) == (1, 1, 1)  # now -> the next step
    assert (by_step[100].predicted, by_step[100].low, by_step[100].high) == (400, 400, 400)  # ordered around it
    assert (by_step[200].predicted, by_step[200].low, by_step[200].high) == (math.inf, 201, math.inf)
    assert (by_step[300].predicted, by_step[300].low, by_step[300].high) == (301, 301, 301)  # past -> next step


def test_ahead_keeps_a_forecast_that_already_means_something() -> None:
    good = Forecast("f", 10, 300.0, 200.0, 500.0)
    assert good.ahead() == good
    assert Forecast("f", 10, 300.0).ahead() == Forecast("f", 10, 300.0)  # no interval: none added
