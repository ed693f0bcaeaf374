"""The callbacks at a glance (docs/callbacks.md): generated from the measure registry and current."""

from __future__ import annotations

from pathlib import Path

import pytest

from capgeo_callbacks.registry import BUILTIN_MEASURES
from capgeo_callbacks.registry.__main__ import main
from capgeo_callbacks.registry.glance import OTHER_CALLBACKS, glance_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_docs_callbacks_md_is_current() -> None:
    committed = (ROOT / "docs" / "callbacks.md").read_text()
    assert committed == glance_markdown(BUILTIN_MEASURES), (
        "docs/callbacks.md is stale: capgeo measures --glance --write docs/callbacks.md")


def test_every_callback_has_a_row_with_its_keys_and_cadence() -> None:
    table = glance_markdown(BUILTIN_MEASURES)
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    # a measure computed on another's rows (ILDR on RankMe's) is in that measure's row: one row per callback
    assert len(rows) == len([spec for spec in BUILTIN_MEASURES if spec.rows_of is None]) + len(OTHER_CALLBACKS)
    for spec in BUILTIN_MEASURES:
        [row] = [line for line in rows if line.startswith(f"| `{spec.callback.__name__}` |")]
        assert all(f"`{key}`" in row for key in spec.keys) and spec.cost in row
        assert ("every validation" if spec.every_n_evals == 1 else f"every {spec.every_n_evals}") in row
    assert "every 32nd validation" in table and "every 4th validation" in table


def test_the_command_prints_the_listing_and_the_pages(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listing] == [spec.name for spec in BUILTIN_MEASURES]
    assert main(["--glance"]) == 0
    assert capsys.readouterr().out == glance_markdown(BUILTIN_MEASURES)
