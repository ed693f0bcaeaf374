"""study.record.calibration_records: the first version's calibration records rendered, and runs.md in step with them."""

from __future__ import annotations

from study.record import calibration_records
from tasks import DIFFICULTIES, TASKS
from tasks.budgets import budget
from tasks.params import resolve_params


def test_runs_md_is_rendered_from_the_committed_records() -> None:
    rows = calibration_records.records()
    assert rows and {tool for tool, _ in rows} == {"explore", "train.py"}
    assert (calibration_records.FOLDER / "runs.md").read_text() == calibration_records.runs_markdown(rows), (
        "docs/calibration/runs.md is stale: python -m study.record.calibration_records runs")


def test_levels_table_has_every_level_and_the_runs_at_its_setting() -> None:
    b = budget("sort", "easy")
    run = {"task": "sort", "difficulty": "easy", "seed": 3, "acquisition_step": 100, "cpu_seconds": 12.0,
           "steps_run": 300}
    run.update(params=resolve_params("sort", "easy"), max_steps=b.max_steps, batch_size=b.batch_size, lr=b.lr)
    table = calibration_records.levels_markdown([("explore", run)])
    lines = [line for line in table.splitlines()[2:] if line.startswith("| ")]
    assert len(lines) == len(TASKS) * len(DIFFICULTIES)
    sort_easy = next(line for line in lines if line.startswith("| sort | easy"))
    assert f"s3: 100 ({100 / b.max_steps:.0%}), 12 s |" in sort_easy
