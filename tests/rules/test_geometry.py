"""The ILDR rule on synthetic series: it warns once, when ILDR first reaches the multiple of its early baseline and
not before, on the layer it is told to read; a run without ILDR leaves it out, said once."""

from __future__ import annotations

import math

import pytest

from capgeo_callbacks.keys import ACC, ILDR, how_to_record
from capgeo_callbacks.rules import ILDRRiseRule, make_rule, replay
from capgeo_callbacks.rules.base import RunView
from capgeo_callbacks.run.tracker import RunTracker
from tests.detection.conftest import PRECURSOR_ACC, STEPS, points

# baseline: the median of 1.0, 1.2, 0.8 = 1.0; then below 2.5 x 1.0 until index 9
RISING = [1.0, 1.2, 0.8, 1.1, 1.3, 1.6, 2.0, 2.3, 2.49, 2.5, 3.5, 5.0] + [6.0] * 8


def view(**ildr: list[float]) -> RunView:
    return RunView.from_points(points(STEPS, PRECURSOR_ACC),
                               {f"{ILDR}{layer}": points(STEPS, values) for layer, values in ildr.items()})


def alert_steps(rule: ILDRRiseRule, run: RunView) -> list[tuple[int, str]]:
    return [(alert.step, alert.layer) for alert in replay(rule, run)[0]]


def test_it_warns_once_when_ildr_reaches_the_multiple_of_its_baseline_and_not_before() -> None:
    rule = make_rule("ildr-rise")
    assert isinstance(rule, ILDRRiseRule) and rule.multiple == 2.5  # the source's threshold, the default
    [alert] = replay(rule, view(norm_f=RISING))[0]
    assert (alert.step, alert.layer, alert.kind) == (900, "norm_f", "run")  # 2.49 at 800 is not 2.5 x 1.0
    assert alert.evidence == "ildr/norm_f reached 2.5, 2.50 x its baseline 1"
    assert alert_steps(ILDRRiseRule(multiple=2.0), view(norm_f=RISING)) == [(600, "norm_f")]  # an argument
    assert alert_steps(ILDRRiseRule(multiple=6.5), view(norm_f=RISING)) == []  # never reached


def test_the_baseline_s_own_values_never_alert_and_missing_points_are_skipped() -> None:
    early = [1.0, 9.0, 1.0, 1.0] + [1.5] * 16  # 9.0 is one of the first three: part of the baseline (median 1.0)
    assert alert_steps(ILDRRiseRule(), view(norm_f=early)) == []
    gaps = [math.nan, 1.0, math.nan, 1.0, 1.0, math.nan, 3.0] + [math.nan] * 13  # ILDR not measured everywhere
    assert alert_steps(ILDRRiseRule(), view(norm_f=gaps)) == [(600, "norm_f")]
    assert alert_steps(ILDRRiseRule(baseline_evals=1), view(norm_f=[0.0] * 10 + [5.0] * 10)) == []  # no baseline


def test_deepest_any_or_a_named_layer() -> None:
    shallow = [1.0] * 4 + [3.0] * 16  # crosses at index 4
    run = view(**{"blocks.0": shallow, "norm_f": RISING})  # watch order: shallowest first
    assert alert_steps(ILDRRiseRule(), run) == [(900, "norm_f")]  # the deepest, by default (the source's choice)
    assert alert_steps(ILDRRiseRule(layer="any"), run) == [(400, "blocks.0")]
    assert alert_steps(ILDRRiseRule(layer="blocks.0"), run) == [(400, "blocks.0")]
    assert ILDRRiseRule(layer="blocks.3").needs.missing(run.series, {}) == ["ildr/blocks.3"]


def test_a_run_without_ildr_leaves_the_rule_out_and_says_so_once() -> None:
    tracker = RunTracker([ILDRRiseRule()])
    rankme = {"rankme/norm_f": []}
    updates = []
    for i, (step, acc) in enumerate(zip(STEPS, PRECURSOR_ACC, strict=True)):
        rankme["rankme/norm_f"].append([step, 10.0 * (i + 1)])  # other series rising: not what it reads
        updates.append(tracker.update(step, acc, measured=rankme))
    assert updates[0].left_out == {"ildr-rise": ["ildr/*"]} and all(not u.left_out for u in updates[1:])
    assert tracker.alerts == [] and tracker.summary()["rules_left_out"] == {"ildr-rise": ["ildr/*"]}
    assert "RankMeMonitor" in how_to_record("ildr/*")  # what the run says it lacks, and how to record it
    assert ILDRRiseRule().needs.series == (ACC, "ildr/*")


@pytest.mark.parametrize(("arguments", "message"), [
    ({"multiple": 1.0}, "multiple must be a finite number above 1"),
    ({"multiple": math.inf}, "multiple must be a finite number above 1"),
    ({"baseline_evals": 0}, "baseline_evals must be an integer >= 1"),
    ({"layer": ""}, "layer must be one of any, deepest"),
    ({"ildr_prefix": "ildr"}, "ildr_prefix must be a tag prefix ending in '/'"),
])
def test_bad_arguments_raise(arguments: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ILDRRiseRule(**arguments)
