"""The overhead budget's controller on an injected clock: the protected start measures everything and draws on the
budget first; after it the optional work is thinned first and the rules' inputs last, to an even cadence, never
dropped; a start that alone exceeds the budget says so once with its figure; the same series in give the same alerts
out; "measure" thins nothing. No timed assertion: every second here is the test's clock."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from capgeo_callbacks.rules import ILDRRiseRule, RunView, default_rules, replay
from capgeo_callbacks.run.budget import (
    FIXED,
    MEASURE,
    OPTIONAL,
    RULE_INPUT,
    OverheadBudget,
    check_overhead_budget,
    fair_rates,
    overhead_budget_arg,
)
from capgeo_callbacks.run.failures import WarnOnce
from capgeo_callbacks.run.reading import capgeo_share, overhead_line
from capgeo_callbacks.run.session import DETECTOR_WORK, Measurements, RunSession

HORIZON = 3000
STEPS = list(range(0, HORIZON + 1, 10))  # 301 evaluations; the protected start is the 31 at steps 0 to 300
KINDS = {"rankme": RULE_INPUT, "probe_acc": OPTIONAL, "detector": FIXED}


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def budget_on(clock: Clock, share: float | str, said: list[str] | None = None, **options: object) -> OverheadBudget:
    budget = OverheadBudget(share, horizon=HORIZON, clock=clock, cpu_clock=clock,
                            warn=None if said is None else WarnOnce("", said.append), **options)
    for name, kind in KINDS.items():
        budget.add_work(name, kind)
    return budget


def simulate(budget: OverheadBudget, clock: Clock, costs: dict[str, float], steps: list[int] = STEPS,
             step_seconds: float = 0.01, every: dict[str, int] | None = None) -> dict[str, list[int]]:
    """A run: ``step_seconds`` of the run's own time per step; at each evaluation every piece of work due by its
    cadence asks the budget and, if allowed, costs ``costs[name]`` seconds; the detector (fixed) runs at every one.
    Returns the steps each piece ran at."""
    every = every or {}
    ran: dict[str, list[int]] = {name: [] for name in costs}
    budget.start()
    previous = 0
    for index, step in enumerate(steps):
        clock.now += (step - previous) * step_seconds
        previous = step
        for name, cost in costs.items():
            due = name == "detector" or index % every.get(name, 1) == 0
            if due and (name == "detector" or budget.allows(name, step)):
                with budget.timing(name):
                    clock.now += cost
                ran[name].append(step)
    return ran


def gaps(ran: list[int], after: int = 300) -> list[int]:
    """The evaluations between a piece's runs after the protected start (10 steps an evaluation)."""
    late = [step for step in ran if step > after]
    return [(b - a) // 10 for a, b in zip(late, late[1:], strict=False)]


def test_the_setting_is_checked_in_one_place() -> None:
    assert check_overhead_budget(None) is None
    assert check_overhead_budget(0) is None and check_overhead_budget("off") is None  # 0 and "off" are off
    assert check_overhead_budget(0.03) == 0.03
    assert check_overhead_budget("measure") == MEASURE
    assert overhead_budget_arg("0.03") == 0.03 and overhead_budget_arg("measure") == MEASURE
    assert overhead_budget_arg("0") is None and overhead_budget_arg("OFF") is None
    for bad in (-0.1, 1.0, 2, float("nan"), True, "0.03", "measured", ""):
        with pytest.raises(ValueError, match="overhead_budget must be a share .*'measure' .*'off'"):
            check_overhead_budget(bad)
    with pytest.raises(ValueError, match="overhead_budget must be"):
        overhead_budget_arg("fast")
    with pytest.raises(ValueError, match="off"):
        OverheadBudget(0)
    with pytest.raises(ValueError, match="kind"):
        OverheadBudget(0.03).add_work("x", "protected")


def test_optional_work_is_thinned_first_and_the_rules_inputs_last_evenly_never_dropped() -> None:
    clock, said = Clock(), []
    budget = budget_on(clock, 0.03, said)
    costs = {"rankme": 0.0025, "probe_acc": 0.0015, "detector": 0.0004}  # 4.4% with everything at every evaluation
    ran = simulate(budget, clock, costs)

    early = [step for step in STEPS if step <= 300]
    assert all(ran[name][: len(early)] == early for name in costs)  # the protected start: everything
    stride = budget.stride
    assert stride > 1 and gaps(ran["rankme"]) == [stride] * len(gaps(ran["rankme"]))  # one even cadence
    assert ran["rankme"][-1] >= HORIZON - 10 * stride  # never dropped: measured to the end
    # the optional work went first: nothing of it after the rules' inputs were first thinned
    first_thinned = next(step for step in STEPS if step > 300 and step not in ran["rankme"])
    assert not [step for step in ran["probe_acc"] if step >= first_thinned]
    [message] = said  # said once, where the rules' inputs are first thinned, with the figure
    assert f"from step {first_thinned} on the rules' inputs are measured at one in {stride}" in message
    assert f"rankme 31 of 31 so far, about {len(ran['rankme'])} of {len(STEPS)} over the run" in message
    assert "capgeo 4.4% of the run's time so far" in message and "overhead_budget='measure'" in message
    record = budget.record()
    assert record["kept"] is True and record["share"] <= 0.03
    assert record["rule_input_stride"] == stride and record["work"]["rankme"]["kind"] == RULE_INPUT
    assert record["work"]["rankme"]["thinned"] == len(STEPS) - len(ran["rankme"])
    assert record["thinned"] == sum(len(STEPS) - len(ran[name]) for name in ("rankme", "probe_acc"))
    line = overhead_line({"overhead": record})  # the verdict's line at the end: the exact figure
    assert f"budget 3%, kept; thinned, evaluations kept of those due: rankme {len(ran['rankme'])} of 301" in line


def test_where_the_rules_inputs_fit_they_stay_whole_and_the_optional_work_is_thinned_evenly() -> None:
    clock = Clock()
    budget = budget_on(clock, 0.05)
    costs = {"rankme": 0.003, "probe_acc": 0.01, "detector": 0.0002}  # 6.3% with everything
    said: list[str] = []
    budget.warn = WarnOnce("", said.append)
    ran = simulate(budget, clock, costs, every={"probe_acc": 4})
    assert ran["rankme"] == STEPS and budget.stride == 1
    [message] = said  # the optional work's thinning, said once with its figure
    assert "what no rule reads is measured less often: probe_acc at about" in message
    assert "8 of 8 so far" in message and "the rules' inputs stay whole" in message
    probe_gaps = gaps(ran["probe_acc"])
    assert set(probe_gaps) == {4, 8}  # at one or two of its due evaluations in a row, evenly spread
    assert len(ran["probe_acc"]) < len(STEPS[::4])
    assert set(ran["probe_acc"]) <= set(STEPS[::4])  # only at evaluations its cadence selects
    record = budget.work["probe_acc"]
    assert record.due == len(STEPS[::4]) and record.runs + record.thinned == record.due
    assert budget.record()["share"] <= 0.05 + costs["probe_acc"] / budget.run_seconds  # within one run of a piece


def test_the_budget_holds_over_the_whole_run_wherever_it_can() -> None:
    held = 0
    for share in (0.01, 0.02, 0.03, 0.05):
        for rankme in (0.0005, 0.001, 0.002, 0.004, 0.008):
            clock, said = Clock(), []
            budget = budget_on(clock, share, said)
            simulate(budget, clock, {"rankme": rankme, "probe_acc": 0.002, "detector": 0.0002}, every={"probe_acc": 2})
            record = budget.record()
            if not budget.said.keys() & {"protected start", "floor"}:  # the start fitted, the rules' inputs at
                # some stride: it holds (what it thinned, it said once)
                assert bool(said) == (record["thinned"] > 0) and len(said) <= 2 and record["said"] == said
                assert record["share"] <= share * 1.01, (share, rankme, record["share"])
                held += 1
            else:  # it could not, and said so: the rules' inputs at their least cadence, nothing optional after
                assert record["rule_input_stride"] == budget.max_stride and record["kept"] is False
    assert held >= 12


def test_a_run_stopped_early_is_held_to_where_it_stops() -> None:
    clock, said = Clock(), []
    budget = budget_on(clock, 0.03, said)
    budget.stop = 1500  # the run's schedule spans 3000 steps (its protected start too); this fit stops at 1500
    ran = simulate(budget, clock, {"rankme": 0.0025, "probe_acc": 0.0015, "detector": 0.0004},
                   steps=[step for step in STEPS if step <= 1500])
    assert ran["rankme"][:31] == STEPS[:31] and not budget.said.keys() & {"protected start", "floor"}
    assert budget.record()["share"] <= 0.03 * 1.01


def test_a_protected_start_over_the_whole_budget_says_so_once_with_its_figure() -> None:
    clock, said = Clock(), []
    budget = budget_on(clock, 0.01, said, max_stride=4)
    ran = simulate(budget, clock, {"rankme": 0.02, "probe_acc": 0.01, "detector": 0.001})
    [message] = said
    start = budget.record()["protected_start"]
    assert start["share_of_run"] > 0.01 and start["step"] == 310
    assert f"{100 * start['share_of_run']:.1f}% of this run's projected" in message and "to step 300" in message
    assert "one in 4" in message  # and the figure: the rules' inputs' evaluations kept, so far and over the run
    assert f"rankme 31 of 31 so far, about {len(ran['rankme'])} of 301 over the run" in message
    assert gaps(ran["rankme"]) == [4] * len(gaps(ran["rankme"]))  # the least cadence, never dropped
    assert [step for step in ran["probe_acc"] if step > 300] == []
    record = budget.record()
    assert record["kept"] is False and record["said"] == [message]
    state = budget.state_dict()  # resumed: not said again
    resumed = budget_on(Clock(), 0.01, said, max_stride=4)
    resumed.load_state_dict(state)
    simulate(resumed, Clock(), {"rankme": 0.02}, steps=list(range(3010, 3100, 10)))
    assert len(said) == 1


def test_measure_times_everything_and_thins_nothing() -> None:
    clock, said = Clock(), []
    budget = budget_on(clock, "measure", said)
    costs = {"rankme": 0.05, "probe_acc": 0.05, "detector": 0.01}
    ran = simulate(budget, clock, costs)
    assert ran == {name: STEPS for name in costs} and said == []
    record = budget.record()
    assert (record["setting"], record["budget"], record["kept"], record["thinned"]) == (MEASURE, None, None, 0)
    own = 301 * 0.11
    assert record["capgeo_seconds"] == pytest.approx(own) and record["run_seconds"] == pytest.approx(30.0)
    assert capgeo_share(record_summary := {"overhead": record}) == pytest.approx(own / 30.0)  # the CPU clock is ours
    after = (270 * 0.11) / 26.9  # from the first evaluation past the start (step 310) on
    assert capgeo_share(record_summary, "wall", "after_start") == pytest.approx(after)
    assert budget.progress() == f"{100 * own / 30:.1f}%"
    assert "measured only, nothing thinned" in overhead_line(record_summary)


def test_the_shares_are_read_from_a_summary_of_any_layout() -> None:
    assert capgeo_share({}) is None and overhead_line({}) == ""
    earlier = {"overhead": {"budget": 0.03, "share": 0.021, "kept": True}}  # before the CPU clock and the start
    assert capgeo_share(earlier, "wall") == 0.021 and capgeo_share(earlier) is None
    assert capgeo_share(earlier, "wall", "after_start") is None
    with pytest.raises(ValueError, match="clock"):
        capgeo_share(earlier, "gpu")


def test_fair_rates_share_equally_and_a_cheap_piece_leaves_the_rest() -> None:
    assert fair_rates({"a": 1.0, "b": 10.0}, 4.0) == {"a": 1.0, "b": 0.3}
    assert fair_rates({"a": 1.0, "b": 1.0}, 1.0) == {"a": 0.5, "b": 0.5}
    assert fair_rates({"a": 1.0}, -1.0) == {"a": 0.0} and fair_rates({"a": 0.0}, 0.0) == {"a": 1.0}


def test_the_same_series_in_give_the_same_alerts_out() -> None:
    """A live session under a budget that thins the rules' inputs (RankMe and ILDR, one piece of work: ILDR is
    measured on RankMe's rows) raises the alerts a replay of its thinned series raises, and those of a session
    without a budget fed the same series; the optional work went first, and the thinning was said once."""
    clock, said = Clock(), []
    info = {"task": "scripted", "difficulty": "easy", "max_steps": 2000, "warmup_steps": 100}
    steps = list(range(0, 2001, 10))
    rules = [*default_rules(), ILDRRiseRule()]

    def rankme(step: int) -> float:  # a collapse after the protected start: trough at steps 800-900
        return 10.0 - 7.0 * max(0.0, 1 - abs(step - 850) / 250) ** 0.5

    def acc(step: int) -> float:
        return min(1.0, max(0.0, (step - 1200) / 200))

    session = RunSession(rules, run_info=info, warn=WarnOnce("", said.append))
    session.budget = OverheadBudget(0.03, horizon=2000, clock=clock, cpu_clock=clock, warn=session.warn)
    session.budget.add_work(DETECTOR_WORK, FIXED)
    for name, kind in (("rankme", RULE_INPUT), ("probe_acc", RULE_INPUT), ("weight_norm", OPTIONAL)):
        session.budget.add_work(name, kind)
    session.budget.start()
    values = {"rankme/last": rankme, "ildr/last": lambda s: 1.0 + 3.0 * max(0.0, min(1.0, (s - 700) / 300)),
              "probe_acc/last": lambda s: 0.1 if s < 1000 else 0.7, "weight_norm/global": lambda s: 40 - s / 100}
    work = {"rankme": ["rankme/last", "ildr/last"], "probe_acc": ["probe_acc/last"],
            "weight_norm": ["weight_norm/global"]}
    series: dict[str, list[list[float]]] = {tag: [] for tag in values}
    for step in steps:
        clock.now += 0.1  # the run's own time: 10 ms a step
        for name, tags in work.items():
            if session.budget.allows(name, step):
                with session.budget.timing(name):
                    clock.now += 0.004
                for tag in tags:
                    series[tag].append([step, values[tag](step)])
        session.evaluate(step, acc(step), measured=Measurements({tag: list(p) for tag, p in series.items()}))

    record = session.build_summary(Measurements(series))["overhead"]
    assert session.budget.stride > 1 and len(series["rankme/last"]) < len(steps)  # the rules' inputs thinned
    assert [p[0] for p in series["ildr/last"]] == [p[0] for p in series["rankme/last"]]  # ILDR rides on RankMe
    first_thinned = next(step for step in steps if step not in [p[0] for p in series["rankme/last"]])
    assert max(p[0] for p in series["weight_norm/global"]) < first_thinned  # the optional work went first
    assert record["work"]["weight_norm"]["thinned"] > 0 and record["rule_input_stride"] == session.budget.stride
    assert len(said) == 1 and said == record["said"] and f"about {len(series['rankme/last'])} of" in said[0]
    assert {rule.name for rule in rules} - {"acc-trend"} <= {alert.rule for alert in session.alerts}
    view = RunView.from_points(session.acc, series, info)
    for rule in rules:
        live = [asdict(alert) for alert in session.alerts if alert.rule == rule.name]
        assert [asdict(alert) for alert in replay(rule, view)[0]] == live
    plain = RunSession(rules, run_info=info, overhead_budget=None)
    for step, value in session.acc:
        so_far = {tag: [p for p in points if p[0] <= step] for tag, points in series.items()}
        plain.evaluate(int(step), value, measured=Measurements(so_far))
    assert [asdict(a) for a in plain.alerts] == [asdict(a) for a in session.alerts]


def test_nested_timings_charge_each_piece_its_own_time_on_both_clocks() -> None:
    clock, cpu = Clock(), Clock()
    budget = OverheadBudget(0.03, clock=clock, cpu_clock=cpu)
    budget.start()
    with budget.timing("detector"):
        clock.now += 1.0
        cpu.now += 0.5
        with budget.timing("figures"):
            clock.now += 2.0
            cpu.now += 1.0
        clock.now += 0.5
    assert budget.work["detector"].seconds == pytest.approx(1.5)
    assert budget.work["figures"].seconds == pytest.approx(2.0)
    assert (budget.work["detector"].cpu_seconds, budget.work["figures"].cpu_seconds) == (0.5, 1.0)
    clock.now += 10.0
    cpu.now += 4.0
    assert budget.run_seconds == pytest.approx(10.0)  # the run's own time: capgeo's is not in it
    assert budget.run_cpu_seconds == pytest.approx(4.0)


def test_without_a_horizon_nothing_is_protected_by_position() -> None:
    clock = Clock()
    budget = OverheadBudget(0.03, clock=clock)
    assert not budget.protects(0)
    budget.horizon = 100
    assert budget.protects(10) and not budget.protects(11)
    with pytest.raises(ValueError, match="horizon"):
        budget.horizon = 0


def test_a_resumed_budget_goes_on_from_its_totals() -> None:
    clock = Clock()
    first = budget_on(clock, 0.03)
    simulate(first, clock, {"rankme": 0.008, "probe_acc": 0.004}, steps=STEPS[:151])
    state = first.state_dict()

    later = Clock()
    later.now = 1e6  # another process: another clock origin
    resumed = budget_on(later, 0.03)
    resumed.load_state_dict(state)
    resumed.start()
    assert resumed.run_seconds == pytest.approx(first.run_seconds)
    assert resumed.own_seconds == pytest.approx(first.own_seconds)
    assert resumed.stride == first.stride and resumed.protected_start == first.protected_start
    assert resumed.work["rankme"].kind == RULE_INPUT
    assert resumed.work["probe_acc"].thinned == first.work["probe_acc"].thinned
    later.now += 3.0
    assert resumed.run_seconds == pytest.approx(first.run_seconds + 3.0)
