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


def test_a_twin_cell_has_30_to_70_percent_acquired(tmp_path: Path) -> None:
    for seed, step in enumerate([300, None, 410, None, None]):  # 2 of 5: 40%
        write_packed({"cell": "sort-medium-b450", "max_steps": 450, "acquisition_step": step},
                     tmp_path / f"a{seed}.json.gz")
    for seed in range(4):  # 4 of 4: not a twin cell
        write_packed({"cell": "reverse-medium-b500", "max_steps": 500, "acquisition_step": 200 + seed},
                     tmp_path / f"b{seed}.json.gz")
    for seed, step in enumerate([1005, 3156, None]):
        write_packed({"cell": "grok-add-f0.45-wd1", "acquisition_step": step}, tmp_path / f"c{seed}.json.gz")
    table = twins.pilots_table(tmp_path)
    assert "| sort-medium-b450 | 5 | 300, -, 410, -, - | 2 of 5 (40%) | yes |" in table
    assert "| reverse-medium-b500 | 4 | 200, 201, 202, 203 | 4 of 4 (100%) | no |" in table
    assert "budget 2080 (the median grokking step)" in table


def test_a_cell_is_decided_once_six_of_eight_pilots_fall_on_one_side() -> None:
    assert twins.decided([100] * 6)  # 6 of 8 acquired: at least 75% whatever the other two give
    assert twins.decided([None] * 6)  # 6 of 8 missed: at most 25%
    assert not twins.decided([100] * 5 + [None])  # 5 or 6 of 8: still open
    assert not twins.decided([None] * 5 + [100] * 2)  # 2 to 3 of 8: still open
    assert not twins.decided([])
