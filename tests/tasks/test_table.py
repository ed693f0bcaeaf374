"""The task tables (tasks/README_TABLE.md, docs/reference.md) are generated from TASK_PARAMS and in sync."""

from __future__ import annotations

from tasks import DIFFICULTIES, TASK_PARAMS, TASKS, params_table
from tasks.table import README_TABLE_PATH


def test_params_table_lists_every_level() -> None:
    table = params_table()
    rows = [line for line in table.split("\n\n")[0].splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == list(TASKS)
    for task, row in zip(TASKS, rows, strict=True):
        for d in DIFFICULTIES:
            for key, value in TASK_PARAMS[task][d].items():
                assert f"{key}={value}" in row
        assert " = " in row.split("|")[-2]  # an example sequence
    for task in TASKS:
        for key in TASK_PARAMS[task]["easy"]:
            assert f"| `{task}` | `{key}` |" in table  # the parameter legend


def test_readme_table_file_is_up_to_date() -> None:
    assert README_TABLE_PATH.read_text() == params_table(), (
        "tasks/README_TABLE.md is stale: regenerate it with `python -m tasks`"
    )


def test_the_reference_shows_the_current_levels_and_budgets() -> None:
    reference = (README_TABLE_PATH.parents[1] / "docs" / "reference.md").read_text()
    levels, _questions, budgets, *_ = params_table().split("\n\n")
    assert levels in reference and budgets in reference, (
        "docs/reference.md task tables are stale (see tasks/README_TABLE.md)")
