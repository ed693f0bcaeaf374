"""Every level has a default run (tasks/budgets.py), and the table shows it."""

from __future__ import annotations

import pytest

from models import SIZES
from tasks import DIFFICULTIES, TASKS, params_table
from tasks.budgets import BUDGETS, budget


def test_every_level_has_a_budget() -> None:
    assert set(BUDGETS) == set(TASKS)
    for task in TASKS:
        assert set(BUDGETS[task]) == set(DIFFICULTIES)
        for d in DIFFICULTIES:
            b = budget(task, d)
            assert b.max_steps >= 100 and b.batch_size >= 1 and b.lr > 0 and b.size in SIZES
            assert b.negative_control is None or len(b.negative_control) > 20  # a measured reason, not a flag


def test_negative_controls_are_named() -> None:
    # parity is the negative-control task (no level learned by xs); elsewhere only hard levels may be
    for task in TASKS:
        if task != "parity":
            assert budget(task, "easy").negative_control is None
    assert budget("sort", "hard").negative_control is None  # the main command is learned


def test_table_lists_budgets() -> None:
    table = params_table()
    for task in TASKS:
        row = next(line for line in table.splitlines() if line.startswith(f"| `{task}` |") and "steps, batch" in line)
        for d in DIFFICULTIES:
            assert f"{budget(task, d).max_steps:,} steps" in row


def test_unknown_level_is_an_error() -> None:
    with pytest.raises(ValueError, match="valid tasks"):
        budget("sorting", "hard")
