"""The run's one read-only view: built by the session at each evaluation, with the series so far, the keys, the
acquisition step read once by the run's detection settings, the forecasts of that evaluation and their
probabilities."""

from __future__ import annotations

import math
from collections.abc import Sequence

from capgeo_callbacks.detection import Alert, DetectionSettings
from capgeo_callbacks.keys import RunKeys
from capgeo_callbacks.rules import Forecast, Rule, RuleOutput, RunView
from capgeo_callbacks.run.session import Measurements, RunSession
from tests.detection.conftest import PRECURSOR_ACC, PRECURSOR_RANKME, STEPS


class Halfway(Rule):
    """Forecasts twice the step it is at, with a probability of acquisition of the accuracy so far."""

    name = "halfway"

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        return RuleOutput(forecast=Forecast(self.name, run.step, 2.0 * run.step, probability=run.last("acc")))


def test_the_view_is_the_latest_evaluation_read_once() -> None:
    session = RunSession([Halfway()], DetectionSettings(patience=2), monitor="val/exact", loss_key="valid/nll")
    assert session.view.step is None and session.view.acquired_step is None and math.isnan(session.view.acc)
    acquired = None
    for i, step in enumerate(STEPS):
        session.evaluate(step, PRECURSOR_ACC[i], {"valid/nll": 2.0 - PRECURSOR_ACC[i]},
                         Measurements({"rankme/blocks.0": [[s, v] for s, v in zip(STEPS[: i + 1], PRECURSOR_RANKME,
                                                                                       strict=False)]}))
        view = session.view
        assert view.step == step and view.acc == PRECURSOR_ACC[i]
        assert view.keys == RunKeys(monitor="val/exact", loss_key="valid/nll")
        assert view.run.values("val/loss")[-1] == 2.0 - PRECURSOR_ACC[i]  # the user's loss, under capgeo's name
        assert view.layers() == {"blocks.0": PRECURSOR_RANKME[i]}
        if acquired is None and view.acquired_step is not None:
            acquired = step
        # acquisition is the settings' (0.5 held 2 evaluations here, not 3), once a view
        assert view.acquired_step == view.run.acquired_step and view.settings.patience == 2
        assert "acquired_step" in vars(view.run)  # cached: computed once for every reader of this evaluation
        if view.acquired_step is None:  # a forecast is made only before acquisition, of a later step
            assert view.forecasts["halfway"].predicted == max(2.0 * step, step + 1)
        else:
            assert view.forecasts == {}
        assert view.probabilities == ({} if view.acquired_step is not None else {"halfway": PRECURSOR_ACC[i]})
    assert acquired is not None and session.view.acquired_step == session.acquired_step
    first_held = [s for s, a in zip(STEPS, PRECURSOR_ACC, strict=True) if a >= 0.5][0]
    assert session.view.acquired_step == first_held


def test_a_resumed_session_shows_its_record_until_the_next_evaluation() -> None:
    first = RunSession([Halfway()])
    for i, step in enumerate(STEPS[:5]):
        first.evaluate(step, PRECURSOR_ACC[i])
    resumed = RunSession([Halfway()])
    resumed.load_state_dict(first.state_dict())
    assert resumed.view.steps == first.view.steps
    assert {rule: (f.step, f.predicted) for rule, f in resumed.view.forecasts.items()} == \
        {rule: (f.step, f.predicted) for rule, f in first.view.forecasts.items()} == {"halfway": (400, 800.0)}
    assert resumed.view.alerts == first.view.alerts
