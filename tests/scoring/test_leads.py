"""Every rule's lead at a capped false-alarm rate, on runs whose answer is known: the grid point calibration must
choose (the false-alarm cap, no control, then the fewest false alarms, then the earliest warning), the held-out
leads and false alarms it gives, a rule with no point within the cap shown at its default, a rule no run can read;
and ``capgeo score --calibration`` printing the same table from summaries on disk."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from capgeo_callbacks.cli import main
from capgeo_callbacks.keys import COMMUTATOR_DEFECT, VAL_LOSS
from capgeo_callbacks.rules import RunView
from capgeo_callbacks.run.summary import write_summary
from capgeo_callbacks.run.tracker import RunTracker
from capgeo_callbacks.scoring.leads import GRIDS, RuleGrid, choose, grid_of, leads_table, rule_leads

STEPS = list(range(0, 1001, 100))  # 11 evaluations, budget 1000
LOSS_GRID = RuleGrid("val-loss-fall", {"fall": (0.05, 0.1, 0.2), "held": (1, 2)})


@dataclass(frozen=True)
class Run:
    """The least a run must offer: a name, its series, its acquisition step, whether it is a control."""

    name: str
    view: RunView
    acquisition: int | None
    control: bool = False


def run(name: str, loss: Sequence[float], acquisition: int | None = None, control: bool = False) -> Run:
    acc = [[step, 0.9 if acquisition is not None and step >= acquisition else 0.0] for step in STEPS]
    loss = [*loss, *[loss[-1]] * (len(STEPS) - len(loss))]
    view = RunView.from_points(acc, {VAL_LOSS: [[s, v] for s, v in zip(STEPS, loss, strict=True)]},
                               {"max_steps": 1000})
    return Run(name, view, acquisition, control)


FLAT = [1.0]
CALIBRATION = [
    # acquirers: 12% below the peak from step 300, 30% from 500, acquired at 600
    *[run(f"a{k}", [1.0, 1.0, 1.0, 0.88, 0.88, 0.7, 0.5, 0.4], 600) for k in range(4)],
    run("n1", [1.0, 1.0, 0.93, 0.93, 1.0]),  # 7% below for two evaluations
    run("n2", [1.0, 1.0, 1.0, 1.0, 0.94, 1.0]),  # 6% below once
    *[run(f"n{k}", FLAT) for k in (3, 4, 5)],
    run("c", [1.0] * 6 + [0.94, 1.0], control=True),  # 6% below once
]
HELDOUT = [
    run("h1", [1.0, 1.0, 0.88], 800),  # 12% below from 200: lead 600, 0.75 of its time to acquisition
    run("h2", [1.0, 1.0, 1.0, 0.85], 500),  # from 300: lead 200, 0.4
    run("h3", [1.0] * 7 + [0.8], 600),  # falls after it acquired: not warned
    run("m1", [1.0] * 9 + [0.85]),  # never acquires, falls late: a false alarm
    run("m2", FLAT), run("m3", FLAT),
    run("d", FLAT, control=True),
]


def test_calibration_chooses_the_point_within_the_cap_that_warns_most_and_earliest() -> None:
    [lead] = rule_leads([LOSS_GRID], CALIBRATION, HELDOUT)
    # (0.05, 1) rings on 2 of 5 runs that never acquire and on the control; (0.2, 2) warns only at acquisition; of
    # the four that warn all 4 acquirers, (0.05, 2) rings on n1; of the three left, (0.1, 1) warns earliest
    assert lead.chosen and lead.settings == {"fall": 0.1, "held": 1} and lead.setting == "fall=0.1, held=1"
    cal = lead.calibration
    assert (cal.warned.k, cal.warned.n, cal.false_alarms.k, cal.false_alarms.n, cal.controls.k) == (4, 4, 0, 5, 0)
    assert cal.lead_share.value == 0.5 and lead.points == 6
    held = lead.heldout
    assert (held.warned.k, held.warned.n) == (2, 3) and held.fired["h3"] == 700
    assert held.lead_steps.value == 400 and (held.lead_steps.low, held.lead_steps.high) == (200, 600)
    assert held.lead_share.value == pytest.approx(0.575)
    assert held.shares == {"h1": 0.75, "h2": 0.4, "h3": 0.0}  # a miss counts 0 where a mean needs it
    assert (held.false_alarms.k, held.false_alarms.n, held.controls.k, held.controls.n) == (1, 3, 0, 1)


def test_within_a_looser_cap_fewer_false_alarms_still_come_first_and_bad_input_is_refused() -> None:
    [loose] = rule_leads([LOSS_GRID], CALIBRATION, HELDOUT, max_false_rate=0.4, max_control_rate=1.0)
    assert loose.settings == {"fall": 0.1, "held": 1}  # (0.05, 1) is now within: no more acquirers, more alarms
    [strict] = rule_leads([LOSS_GRID], CALIBRATION, HELDOUT, max_false_rate=0.0)
    assert strict.settings == {"fall": 0.1, "held": 1} and strict.calibration.false_alarms.k == 0
    with pytest.raises(ValueError, match="max_false_rate is a share of runs"):
        rule_leads([LOSS_GRID], CALIBRATION, HELDOUT, max_false_rate=1.5)
    with pytest.raises(ValueError, match="share a name"):
        rule_leads([LOSS_GRID], [*CALIBRATION, CALIBRATION[0]], HELDOUT)


def test_no_point_within_the_cap_shows_the_rule_at_its_default() -> None:
    falling_control = run("c", [1.0, 0.5], control=True)  # every point alerts it
    [lead] = rule_leads([LOSS_GRID], [*CALIBRATION[:-1], falling_control], HELDOUT)
    assert not lead.chosen and lead.settings == {"fall": 0.1, "held": 3}  # the registered rule's own
    assert lead.setting == "none of 6 within the cap; at its default (fall=0.1, held=3)"
    assert lead.calibration.controls.k == 1  # replayed on calibration at the default too
    assert lead.heldout.fired["h1"] == 400 and lead.heldout.fired["h2"] == 500  # held 3 evaluations from 200, 300
    assert lead.heldout.warned.k == 1  # h2's alert comes at its acquisition: no warning


def test_a_rule_no_run_can_read_is_said_and_the_table_holds_every_figure() -> None:
    leads = rule_leads([LOSS_GRID, grid_of("ildr-rise")], CALIBRATION, HELDOUT)
    unread = leads[1]
    assert unread.calibration.left_out == len(CALIBRATION) and unread.heldout.left_out == len(HELDOUT)
    table = leads_table(leads).splitlines()
    assert table[0].startswith("| rule | operating point (chosen on calibration) |") and table[1].count("---") == 8
    assert table[2] == ("| val-loss-fall | fall=0.1, held=1 | 4 of 4; 0 of 5; 0 of 1 | 2 of 3 | 400 [200, 600] (n=2) "
                        "| 0.57 [0.40, 0.75] (n=2) | 1/3 = 0.33 [0.06, 0.79] | 0 of 1 |")
    assert table[3].startswith("| ildr-rise | not measured on the calibration runs (10 lack what it reads) |")


def defect_run(name: str, multiple: float, rise_at: int = 10_000, acquisition: int | None = None,
               control: bool = False) -> Run:
    """A run whose commutator defect stands at 1 until ``rise_at`` and at ``multiple`` from there."""
    acc = [[step, 0.9 if acquisition is not None and step >= acquisition else 0.0] for step in STEPS]
    defect = [[step, multiple if step >= rise_at else 1.0] for step in STEPS]
    return Run(name, RunView.from_points(acc, {COMMUTATOR_DEFECT: defect}, {"max_steps": 1000}), acquisition, control)


def test_the_commutator_rise_takes_the_multiple_that_keeps_the_false_alarms_within_the_cap() -> None:
    calibration = [*[defect_run(f"a{k}", 2.5, 300, 600) for k in range(4)],  # acquirers: 2.5 x from 300
                   defect_run("n1", 1.7, 400), defect_run("n2", 1.7, 400),  # 1.7 x: 2 of 5 that never acquire
                   *[defect_run(f"n{k}", 1.0) for k in (3, 4, 5)], defect_run("c", 1.0, control=True)]
    heldout = [defect_run("h1", 2.2, 200, 800), defect_run("h2", 4.0, 500, 500),  # h2 rises at its acquisition
               defect_run("m1", 2.1, 700), defect_run("m2", 1.0), defect_run("d", 1.0, control=True)]
    [lead] = rule_leads([GRIDS["commutator-rise"]], calibration, heldout)
    # 1.5 rings on 2 of the 5 that never acquire (over the 20% cap); 3 and 5 warn no acquirer; 2 warns all 4
    assert GRIDS["commutator-rise"].geometric and lead.chosen and lead.settings == {"multiple": 2.0}
    cal = lead.calibration
    assert (cal.warned.k, cal.warned.n, cal.false_alarms.k, cal.false_alarms.n, cal.controls.k) == (4, 4, 0, 5, 0)
    held = lead.heldout
    # h1's rise at 200 is its third value, part of its baseline: it alerts at the next, 300
    assert held.fired == {"h1": 300, "h2": 500, "m1": 700, "m2": None, "d": None}
    assert (held.warned.k, held.warned.n, held.false_alarms.k, held.false_alarms.n) == (1, 2, 1, 2)
    assert held.leads == {"h1": 500} and held.shares == {"h1": 0.625, "h2": 0.0}


def test_the_policy_ties() -> None:
    [lead] = rule_leads([LOSS_GRID], CALIBRATION, HELDOUT)
    found = [lead.calibration, lead.calibration]
    assert choose(found) == 0  # a tie throughout: the grid's order
    assert choose(found, prefer=[0, 1]) == 1  # the caller's preference before the order
    assert choose([]) is None


def test_every_grid_makes_its_registered_rule() -> None:
    for name, grid in GRIDS.items():
        assert all(grid.make(point).name == name for point in grid.points())
        assert set(grid.default) == set(grid.grid)  # the default is the factory's own setting of each parameter
    assert grid_of("warmup-end").points() == [{}]  # a registered rule without a grid: itself alone
    with pytest.raises(ValueError, match="unknown rule 'nope'"):
        grid_of("nope")


# -- the command ------------------------------------------------------------------------------------------------


def write(folder: Path, name: str, loss: Sequence[float], acquired_at: int | None, seed: int, **info: object) -> None:
    """A run summary on disk: the accuracy rising to 0.9 at ``acquired_at`` (held from there), the loss given."""
    tracker = RunTracker(rules=[], run_info={"task": "t", "difficulty": "d", "seed": seed, "max_steps": 1000, **info})
    loss = [*loss, *[loss[-1]] * (len(STEPS) - len(loss))]
    for step, value in zip(STEPS, loss, strict=True):
        tracker.update(step, 0.9 if acquired_at is not None and step >= acquired_at else 0.0, {VAL_LOSS: value})
    write_summary(tracker.summary(), folder / name)


def test_capgeo_score_chooses_operating_points_on_calibration_runs(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    calibration, heldout = tmp_path / "calibration", tmp_path / "heldout"
    for k in range(3):
        write(calibration, f"a{k}", [1.0, 1.0, 0.85, 0.85, 0.85, 0.6], 600, seed=k)
        write(calibration, f"n{k}", FLAT, None, seed=k)
    write(calibration, "a3", [1.0, 1.0, 0.85, 0.85, 0.85, 0.85, 0.6], 600, seed=3)  # never 30% below before 600
    write(calibration, "n3", [1.0, 0.8], None, seed=3)  # falls early and stays: 1 of 4 runs that never acquire
    write(calibration, "c", FLAT, None, seed=9, shuffled_answers=True)
    write(heldout, "h1", [1.0, 1.0, 1.0, 0.8], 700, seed=100)
    write(heldout, "h2", [1.0] * 5 + [0.8], 700, seed=101)
    write(heldout, "m", FLAT, None, seed=102)
    assert main(["score", str(heldout), "--rules", "clock-20", "--calibration", str(calibration),
                 "--leads", "val-loss-fall", "ildr-rise", "--max-false-rate", "0.25"]) == 0
    out = capsys.readouterr().out
    assert "each rule's operating point chosen on the 9 calibration runs" in out and "held out on the 3 runs" in out
    rows = [line for line in out.splitlines() if line.startswith(("| val-loss-fall", "| ildr-rise"))]
    # only a fall of 15% or less warns a3; (0.05, 1) and (0.1, 1) warn all 4 acquirers at step 200 and ring on n3
    # alone (1 of 4, within 0.25): a tie, the grid's order
    assert rows[0].startswith("| val-loss-fall | fall=0.05, held=1 | 4 of 4; 1 of 4; 0 of 1 | 2 of 2 | 300 [200, 400]")
    assert rows[1].startswith("| ildr-rise | not measured")
    assert main(["score", str(heldout), "--rules", "clock-20", "--calibration", str(calibration),
                 "--leads", "val-loss-fall"]) == 0  # the default cap, 0.2: n3's alert is one too many
    assert "| val-loss-fall | fall=0.3, held=1 | 3 of 4; 0 of 4; 0 of 1 | 0 of 2 | - (n=0) |" in capsys.readouterr().out
    for wrong, said in ((["--leads", "val-loss-fall"], "give --calibration FOLDER"),
                        (["--calibration", str(calibration), "--leads", "nope"], "unknown rule 'nope'"),
                        (["--calibration", str(calibration), "--max-false-rate", "2"], "share of runs in [0, 1]")):
        with pytest.raises(SystemExit) as exited:
            main(["score", str(heldout), *wrong])
        assert exited.value.code == 2 and said in capsys.readouterr().err


def test_capgeo_score_refuses_to_choose_on_the_runs_it_scores(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "calibration", "a", [1.0, 0.8], 600, seed=1)
    write(tmp_path / "heldout", "a-again", [1.0, 0.8], 600, seed=1)  # the same run, written twice
    with pytest.raises(SystemExit) as exited:
        main(["score", str(tmp_path / "heldout"), "--calibration", str(tmp_path / "calibration")])
    assert exited.value.code == 2 and "1 runs scored are calibration runs too" in capsys.readouterr().err
