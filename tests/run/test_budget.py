"""The overhead budget's controller on an injected clock: given the costs, it thins what it should and never the
protected work or the protected start of the run; no timed assertion."""

from __future__ import annotations

import pytest

from capgeo_callbacks.run.budget import OverheadBudget, check_overhead_budget


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def simulate(budget: OverheadBudget, clock: Clock, costs: dict[str, float], steps: list[int],
             step_seconds: float, every: dict[str, int] | None = None) -> dict[str, list[int]]:
    """A run: ``step_seconds`` of training per step between evaluations at ``steps``; at each, every piece of work
    due by its cadence asks the budget and, if allowed, costs ``costs[name]`` seconds. Returns the steps each ran at."""
    every = every or {}
    ran: dict[str, list[int]] = {name: [] for name in costs}
    budget.start()
    previous = 0
    for index, step in enumerate(steps):
        clock.now += (step - previous) * step_seconds
        previous = step
        for name, cost in costs.items():
            if index % every.get(name, 1) == 0 and budget.allows(name, step):
                with budget.timing(name):
                    clock.now += cost
                ran[name].append(step)
    return ran


def test_the_setting_is_checked_in_one_place() -> None:
    assert check_overhead_budget(None) is None
    assert check_overhead_budget(0) is None  # 0 is off
    assert check_overhead_budget(0.03) == 0.03
    for bad in (-0.1, 1.0, 2, float("nan"), True, "0.03"):
        with pytest.raises(ValueError, match="overhead_budget must be"):
            check_overhead_budget(bad)
    with pytest.raises(ValueError, match="off"):
        OverheadBudget(0)


def test_protected_work_and_the_protected_start_are_never_thinned_and_optional_work_is() -> None:
    clock = Clock()
    budget = OverheadBudget(0.05, horizon=1000, clock=clock)
    budget.add_work("rankme", protected=True)
    budget.add_work("probe_acc")
    steps = list(range(0, 1001, 10))  # 101 evaluations, every 10 steps of 0.1 s: 1 s of training between them
    ran = simulate(budget, clock, {"rankme": 0.02, "probe_acc": 0.2}, steps, step_seconds=0.1)

    assert ran["rankme"] == steps  # read by the rules: every evaluation
    early = [s for s in steps if s <= 100]
    assert ran["probe_acc"][: len(early)] == early  # the first tenth of the run: every evaluation
    later = [s for s in ran["probe_acc"] if s > 100]
    assert 0 < len(later) < len(steps) - len(early)  # thinned after it, not dropped
    record = budget.record()
    assert record["work"]["rankme"]["thinned"] == 0
    assert record["work"]["probe_acc"]["thinned"] == len(steps) - len(ran["probe_acc"])
    assert record["work"]["probe_acc"]["runs"] == len(ran["probe_acc"])
    # over the run, the share is held to the budget (within one run of the optional piece)
    assert budget.run_seconds == pytest.approx(100.0)
    assert record["share"] <= 0.05 + 0.2 / 100.0
    assert record["share"] == pytest.approx(budget.own_seconds / budget.run_seconds)


def test_a_budget_the_protected_work_alone_exceeds_thins_all_optional_work_after_the_start() -> None:
    clock = Clock()
    budget = OverheadBudget(0.01, horizon=1000, clock=clock)
    budget.add_work("rankme", protected=True)
    steps = list(range(0, 1001, 10))
    ran = simulate(budget, clock, {"rankme": 0.05, "probe_acc": 0.01}, steps, step_seconds=0.1)
    assert ran["rankme"] == steps
    assert ran["probe_acc"] == [s for s in steps if s <= 100]
    record = budget.record()
    assert record["kept"] is False and record["share"] > 0.01  # said, not hidden


def test_a_generous_budget_thins_nothing() -> None:
    clock = Clock()
    budget = OverheadBudget(0.5, horizon=1000, clock=clock)
    steps = list(range(0, 1001, 10))
    ran = simulate(budget, clock, {"rankme": 0.01, "probe_acc": 0.05}, steps, step_seconds=0.1)
    assert ran == {"rankme": steps, "probe_acc": steps}
    assert budget.record()["thinned"] == 0 and budget.record()["kept"] is True


def test_optional_pieces_share_equally_so_a_costly_one_runs_rarely_but_is_not_crowded_out() -> None:
    clock = Clock()
    budget = OverheadBudget(0.1, horizon=1000, clock=clock, protected_share=0.0)
    budget.add_work("probe_acc")
    budget.add_work("llc")
    steps = list(range(0, 1001, 10))
    ran = simulate(budget, clock, {"probe_acc": 0.05, "llc": 1.0}, steps, step_seconds=0.1)
    assert len(ran["llc"]) >= 3  # its equal part (5 s over the run) pays for several of its 1 s runs
    assert len(ran["probe_acc"]) > 5 * len(ran["llc"])
    # each holds to its part: half of 10% of the run, within one run of its own
    for name, cost in (("probe_acc", 0.05), ("llc", 1.0)):
        assert budget.work[name].seconds <= 0.05 * budget.run_seconds + cost


def test_a_cadence_is_kept_and_only_due_evaluations_are_counted() -> None:
    clock = Clock()
    budget = OverheadBudget(0.03, horizon=1000, clock=clock)
    steps = list(range(0, 1001, 10))
    ran = simulate(budget, clock, {"probe_acc": 0.1}, steps, step_seconds=0.1, every={"probe_acc": 4})
    record = budget.work["probe_acc"]
    assert record.due == len(steps[::4]) and record.runs + record.thinned == record.due
    assert set(ran["probe_acc"]) <= set(steps[::4])


def test_nested_timings_charge_each_piece_its_own_time() -> None:
    clock = Clock()
    budget = OverheadBudget(0.03, clock=clock)
    budget.start()
    with budget.timing("detector"):
        clock.now += 1.0
        with budget.timing("figures"):
            clock.now += 2.0
        clock.now += 0.5
    assert budget.work["detector"].seconds == pytest.approx(1.5)
    assert budget.work["figures"].seconds == pytest.approx(2.0)
    clock.now += 10.0
    assert budget.run_seconds == pytest.approx(10.0)  # the run's own time: capgeo's is not in it


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
    first = OverheadBudget(0.05, horizon=1000, clock=clock)
    first.add_work("rankme", protected=True)
    simulate(first, clock, {"rankme": 0.02, "probe_acc": 0.2}, list(range(0, 501, 10)), step_seconds=0.1)
    state = first.state_dict()

    later = Clock()
    later.now = 1e6  # another process: another clock origin
    resumed = OverheadBudget(0.05, horizon=1000, clock=later)
    resumed.load_state_dict(state)
    resumed.start()
    assert resumed.run_seconds == pytest.approx(first.run_seconds)
    assert resumed.own_seconds == pytest.approx(first.own_seconds)
    assert resumed.work["rankme"].protected and resumed.work["probe_acc"].thinned == first.work["probe_acc"].thinned
    later.now += 3.0
    assert resumed.run_seconds == pytest.approx(first.run_seconds + 3.0)
