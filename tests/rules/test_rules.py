"""The shipped rules on the scripted run, and a user's own rule and forecaster plugged in."""

from __future__ import annotations

import math
from collections.abc import Sequence

from capgeo_callbacks.detection import Alert
from capgeo_callbacks.rules import RULES, Forecast, Rule, RuleOutput, RunView, make_rule, register_rule, replay
from capgeo_callbacks.run.tracker import RunTracker
from tests.detection.conftest import PRECURSOR_ACC, STEPS
from tests.rules.conftest import INFO, live, scripted_view


def test_the_baselines_on_the_scripted_run() -> None:
    view = scripted_view()
    first = {name: next((a.step for a in replay(make_rule(name), view)[0] if a.kind == "run"), None)
             for name in ("rankme-recovery", "loss-onset", "logprob-emergence", "probe-crossing", "warmup-end",
                          "clock-20", "ildr-rise", "commutator-rise")}
    # rankme-recovery: blocks.0 recovers at 1100; loss onset: log-prob above -2 + 0.05 from 600, confirmed at 700;
    # log-prob reaches log(0.5) = -0.69 at 1200; the probe 0.2 + 0.5 x 0.8 = 0.6 at 600; warm-up end at 100;
    # 20% of 1,900 steps at 400; ILDR 2.7 >= 2.5 x its baseline 1.0 at 800; the defect 8.0 = 2 x its baseline 4.0 at
    # 900
    assert first == {"rankme-recovery": 1100, "loss-onset": 700, "logprob-emergence": 1200, "probe-crossing": 600,
                     "warmup-end": 100, "clock-20": 400, "ildr-rise": 800, "commutator-rise": 900}


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
        # 0.6 x 1,900 = 1,140: from step 1,200 on, "the next step"; none once acquisition (1,500) is confirmed (1,700)
        expected = [] if step >= 1700 else [1140.0] if step < 1140 else [step + 1]
        assert [f.predicted for f in update.forecasts] == expected
    summary = tracker.summary()
    assert summary["rules"] == {"halfway-clock": {}, "acc-above": {"level": 0.15}}
    assert len(summary["forecasts"]["halfway-clock"]) == 17
    assert summary["forecasts"]["halfway-clock"][0] == {"step": 0, "predicted": 1140.0, "beyond": False,
                                                       "low": 760.0, "high": 1520.0}
    assert [a["message"] for a in summary["alerts"]] == ["capgeo acc-above alert at step 1400: accuracy reached 0.15"]


