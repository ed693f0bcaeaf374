"""The rise-over-baseline rules on synthetic series. ILDR: it warns once, when ILDR first reaches the multiple of its
early baseline and not before, on the layer it is told to read; a run without ILDR leaves it out, said once. The
commutator defect: the same on its one series, gaps (evaluations it does not measure at) skipped."""

from __future__ import annotations

import math

import pytest

from capgeo_callbacks.keys import ACC, COMMUTATOR_DEFECT, ILDR, how_to_record
from capgeo_callbacks.rules import CommutatorRiseRule, ILDRRiseRule, make_rule, replay
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


# -- the commutator defect --------------------------------------------------------------------------------------------
def defect_view(values: list[float]) -> RunView:
    return RunView.from_points(points(STEPS, PRECURSOR_ACC), {COMMUTATOR_DEFECT: points(STEPS, values)})


def test_commutator_rise_warns_once_at_the_multiple_of_its_baseline_and_not_before() -> None:
    rule = make_rule("commutator-rise")
    assert isinstance(rule, CommutatorRiseRule) and (rule.multiple, rule.baseline_evals) == (2.0, 3)
    rising = [2.0 * value for value in RISING]  # baseline 2.0; 2 x 2.0 = 4.0 first reached at index 6
    [alert] = replay(rule, defect_view(rising))[0]
    assert (alert.step, alert.kind, alert.rule) == (600, "run", "commutator-rise")
    assert alert.evidence == "commutator/defect reached 4, 2.00 x its baseline 2"
    assert [a.step for a in replay(CommutatorRiseRule(multiple=2.5), defect_view(rising))[0]] == [900]
    assert replay(CommutatorRiseRule(multiple=6.5), defect_view(rising))[0] == []


def test_commutator_rise_reads_a_series_measured_at_every_8th_evaluation() -> None:
    # measured at indexes 0, 8, 16 only (NaN: not measured there); the baseline needs 3 values, so only a fourth
    # value could alert, and there is none
    sparse = [5.0 if i % 8 == 0 else math.nan for i in range(20)]
    assert replay(CommutatorRiseRule(), defect_view(sparse))[0] == []
    sparse = [1.0 if i % 4 == 0 else math.nan for i in range(12)] + [3.0] + [math.nan] * 7  # measured at 0,4,8,12
    assert [a.step for a in replay(CommutatorRiseRule(), defect_view(sparse))[0]] == [1200]
    early_spike = [1.0, 9.0, 1.0, 1.5] + [1.9] * 16  # the spike is part of the baseline (median 1.0): no alert
    assert replay(CommutatorRiseRule(), defect_view(early_spike))[0] == []


def test_a_run_without_the_defect_leaves_commutator_rise_out_and_says_how_to_record_it() -> None:
    tracker = RunTracker([CommutatorRiseRule()])
    update = tracker.update(0, 0.0, measured={"rankme/norm_f": [[0, 1.0]]})
    assert update.left_out == {"commutator-rise": [COMMUTATOR_DEFECT]}
    assert "CommutatorDefectMonitor" in how_to_record(COMMUTATOR_DEFECT)
    assert CommutatorRiseRule().needs.series == (ACC, COMMUTATOR_DEFECT)


@pytest.mark.parametrize(("arguments", "message"), [
    ({"multiple": 0.5}, "multiple must be a finite number above 1"),
    ({"baseline_evals": 0}, "baseline_evals must be an integer >= 1"),
    ({"key": ""}, "key must be a series' tag"),
])
def test_commutator_rise_bad_arguments_raise(arguments: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CommutatorRiseRule(**arguments)
