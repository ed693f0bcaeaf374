"""A series' fall from its highest value so far, held: known steps on hand-made series; the warm-up's dip ignored
when asked; a layer chosen; bad settings refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from capgeo_callbacks.keys import RANKME, VAL_LOSS
from capgeo_callbacks.rules import FallFromPeakRule, Rule, RunView, make_rule, replay

STEPS = [0, 100, 200, 300, 400, 500, 600]


def view(series: dict[str, list[float]]) -> RunView:
    points = {tag: [[s, v] for s, v in zip(STEPS, values, strict=False)] for tag, values in series.items()}
    return RunView.from_points([[s, 0.0] for s in STEPS], points, {"max_steps": 600})


def alert_steps(rule: FallFromPeakRule, run: RunView) -> list[tuple[int, str]]:
    return [(alert.step, alert.layer) for alert in replay(rule, run)[0]]


LOSS = view({VAL_LOSS: [1.0, 1.0, 0.95, 0.89, 0.88, 0.87, 0.5]})


@pytest.mark.parametrize(("fall", "held", "step"), [(0.05, 1, 200), (0.1, 1, 300), (0.1, 3, 500), (0.1, 5, None),
                                                    (0.5, 1, 600), (0.6, 1, None)])
def test_the_loss_fall_alerts_where_it_has_held(fall: float, held: int, step: int | None) -> None:
    found = alert_steps(FallFromPeakRule(VAL_LOSS, fall, held), LOSS)
    assert found == ([] if step is None else [(step, "")])


def test_the_peak_is_the_highest_value_so_far_not_the_first() -> None:
    rising = view({VAL_LOSS: [1.0, 2.0, 1.85, 1.7, 1.9]})  # 10% below 2.0 is 1.8: reached at 300 only
    assert alert_steps(FallFromPeakRule(VAL_LOSS, 0.1, 1), rising) == [(300, "")]
    assert alert_steps(FallFromPeakRule(VAL_LOSS, 0.1, 2), rising) == []  # back above at 400


def test_the_warm_up_dip_is_ignored_when_asked_and_the_layer_is_chosen() -> None:
    run = view({f"{RANKME}blocks.0": [10.0, 5.0, 10.0, 11.0, 9.8, 9.5, 9.0],
                f"{RANKME}blocks.1": [10.0, 10.0, 10.0, 10.0, 10.0, 8.0, 8.0]})
    assert alert_steps(FallFromPeakRule(RANKME, 0.1, 1, layer="any"), run) == [(100, "blocks.0")]  # the dip
    assert alert_steps(FallFromPeakRule(RANKME, 0.1, 1, ignore_steps=200, layer="any"), run) == [(400, "blocks.0")]
    assert alert_steps(FallFromPeakRule(RANKME, 0.1, 1), run) == [(500, "blocks.1")]  # the deepest by default
    assert alert_steps(FallFromPeakRule(RANKME, 0.1, 1, layer="blocks.0"), run) == [(100, "blocks.0")]


def test_a_missing_value_is_no_alert_and_held_counts_measured_values() -> None:
    gaps = view({VAL_LOSS: [1.0, math.nan, 0.8, math.nan, 0.8, 0.8, math.nan]})
    assert alert_steps(FallFromPeakRule(VAL_LOSS, 0.1, 2), gaps) == [(400, "")]  # 0.8 at 200 and at 400
    late = view({VAL_LOSS: [1.0, 1.0, 1.0, 1.0, 1.0, math.nan, 0.5]})
    assert alert_steps(FallFromPeakRule(VAL_LOSS, 0.1, 1), late) == [(600, "")]


def test_the_registered_rules_and_their_settings() -> None:
    loss, rankme = make_rule("val-loss-fall"), make_rule("rankme-fall")
    assert (loss.key, loss.fall, loss.held, loss.ignore_steps) == (VAL_LOSS, 0.1, 3, 0)
    assert (rankme.key, rankme.fall, rankme.held, rankme.ignore_steps) == (RANKME, 0.1, 1, 50)
    assert FallFromPeakRule.from_settings(loss.settings()).settings() == loss.settings()
    assert loss.needs.series == ("acc", VAL_LOSS) and rankme.needs.series == ("acc", f"{RANKME}*")


@pytest.mark.parametrize("bad", [{"fall": 0.0}, {"fall": 1.0}, {"held": 0}, {"held": 1.5}, {"ignore_steps": -1},
                                 {"key": ""}, {"layer": ""}])
def test_bad_settings_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad)) if "key" not in bad else "key"):
        FallFromPeakRule(**bad)


def test_the_first_alert_in_one_pass_is_the_replays() -> None:
    """``first_run_alert``'s one pass finds the alert that replaying the rule evaluation by evaluation finds (the
    base class's replay), on noisy series with gaps, peaks before the ignored steps and several layers."""
    found = tried = 0
    for seed in range(6):
        rng = np.random.default_rng(seed)
        steps = list(range(0, 1000, 10))
        series = {}
        for layer in ("blocks.0", "blocks.1", "norm_f"):
            values = np.exp(np.cumsum(rng.normal(0.0, 0.05, len(steps))))
            values[rng.random(len(steps)) < 0.15] = math.nan
            series[f"{RANKME}{layer}"] = [[s, float(v)] for s, v in zip(steps, values, strict=True)]
        series[VAL_LOSS] = series[f"{RANKME}blocks.1"]
        run = RunView.from_points([[s, 0.0] for s in steps], series, {"max_steps": 1000})
        for key, layer in ((VAL_LOSS, "deepest"), (RANKME, "deepest"), (RANKME, "any"), (RANKME, "blocks.0")):
            for fall in (0.05, 0.2, 0.5):
                for held in (1, 2, 5):
                    for ignore_steps in (0, 200):
                        rule = FallFromPeakRule(key, fall, held, ignore_steps, layer)
                        one_pass = rule.first_run_alert(run)
                        assert one_pass == Rule.first_run_alert(rule, run), (seed, key, layer, fall, held)
                        assert one_pass == next(iter(replay(rule, run)[0]), None)
                        found, tried = found + (one_pass is not None), tried + 1
    assert 0 < found < tried  # the settings reach both outcomes
