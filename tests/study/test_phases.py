"""The study's phases: the held-out gate, the corpus' refusal of held-out seeds, the report on nothing measured.
(The launcher that runs them is tested in tests/launch.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from study import heldout


def test_held_out_seeds_need_a_committed_registration(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no committed registration"):
        heldout.heldout_jobs(tmp_path / "registration.json")
    uncommitted = tmp_path / "registration.json"
    uncommitted.write_text("{}")
    with pytest.raises(SystemExit, match="no committed registration"):
        heldout.heldout_jobs(uncommitted)


def test_the_corpus_refuses_held_out_seeds() -> None:
    from study.corpus import _job

    with pytest.raises(ValueError, match="held-out seed"):
        _job("hard", "sort", "hard", 100)


def test_the_report_counts_a_target_on_nothing_measured_as_missed(tmp_path: Path) -> None:
    text = heldout.report(folder=tmp_path)
    targets = text.split("## Targets")[1]
    rows = [line for line in targets.splitlines()
            if line.startswith("| ") and "target |" not in line and "---" not in line]
    assert len(rows) == 5 and all(row.endswith("| **no** |") for row in rows), targets
    assert "0 runs kept" in text
