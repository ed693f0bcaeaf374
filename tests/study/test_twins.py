"""The twins' pilots: every candidate cell seed by seed (a phase cut short covers every cell), pilot seeds apart
from every calibration and held-out seed, and the table calls a cell a twin cell only at 30-70% acquired."""

from __future__ import annotations

from pathlib import Path

from study.phases import twins
from study.phases.corpus import write_packed


def test_pilots_run_seed_by_seed_over_every_cell_on_their_own_seeds() -> None:
    jobs = twins.pilot_jobs()
    cells = len(twins.CANDIDATES) + len(twins.ADDED_CANDIDATES) + len(twins.GROKKING_CANDIDATES)
    assert len(jobs) == cells * len(twins.PILOT_SEEDS)
    first = {trial.tags["cell"] for _, trial in jobs[:cells]}
    assert len(first) == cells  # the first seed of every cell before any second seed
    assert min(twins.PILOT_SEEDS) >= 3000  # held-out seeds are 100-299, calibration 0-2
    sort_pilot = next(trial for name, trial in jobs if name.startswith("sort-medium-b450"))
    assert sort_pilot.args.max_steps == 450 and sort_pilot.args.lr == 0.001


def test_a_twin_cell_has_30_to_70_percent_of_its_eight_pilots_acquired(tmp_path: Path) -> None:
    for seed, step in enumerate([300, None, 410, None, None, 380, None, None]):  # 3 of 8: 38%
        write_packed({"cell": "sort-medium-b450", "max_steps": 450, "acquisition_step": step},
                     tmp_path / f"a{seed}.json.gz")
    for seed in range(6):  # 6 of 6: at least 75% whatever its last two give, so they are not run
        write_packed({"cell": "reverse-medium-b500", "max_steps": 500, "acquisition_step": 200 + seed},
                     tmp_path / f"b{seed}.json.gz")
    for seed, step in enumerate([300, None]):  # 1 of 2: still open
        write_packed({"cell": "mul-medium-b1200", "max_steps": 1200, "acquisition_step": step},
                     tmp_path / f"d{seed}.json.gz")
    for seed, step in enumerate([1005, 3156, None, 1200, 900, 2000, None, None]):  # 4 of 8 by 2000
        write_packed({"cell": "grok-add-f0.45-wd1", "acquisition_step": step}, tmp_path / f"c{seed}.json.gz")
    table = twins.pilots_table(tmp_path)
    assert "| sort-medium-b450 | 8 | 300, -, 410, -, -, 380, -, - | 3 of 8 (38%) | yes |" in table
    assert "| reverse-medium-b500 | 6 | 200, 201, 202, 203, 204, 205 | 6 of 6 (100%) | no (decided" in table
    assert "| mul-medium-b1200 | 2 | 300, - | 1 of 2 (50%) | open so far (2 of 8 pilots) |" in table
    assert "budget 2000 (half grokked by then) |" in table
    assert twins.twin_cells(tmp_path) == [
        {"cell": "sort-medium-b450", "family": "tasks",
         "argv": ["--task", "sort", "--difficulty", "medium", "--max-steps", "450"]},
        {"cell": "grok-add-f0.45-wd1", "family": "grokking",
         "config": {"operation": "add", "fraction": 0.45, "weight_decay": 1.0, "max_steps": 2000}}]


def test_a_grokking_budget_is_the_step_by_which_half_the_pilots_grokked() -> None:
    assert twins.grokking_budget([1000, 2000, None]) == 2000  # a pilot that never grokked: later than any
    assert twins.grokking_budget([1000, 3000, 2000, 1500]) == 1500  # half had grokked by 1500
    assert twins.grokking_budget([1000, None, None]) is None  # fewer than half grokked: no budget
    assert twins.grokking_budget([]) is None


def test_a_cell_is_decided_once_six_of_eight_pilots_fall_on_one_side() -> None:
    assert twins.decided([100] * 6)  # 6 of 8 acquired: at least 75% whatever the other two give
    assert twins.decided([None] * 6)  # 6 of 8 missed: at most 25%
    assert not twins.decided([100] * 5 + [None])  # 5 or 6 of 8: still open
    assert not twins.decided([None] * 5 + [100] * 2)  # 2 to 3 of 8: still open
    assert not twins.decided([])
