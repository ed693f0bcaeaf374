"""The study's phases: the held-out gate, the corpus' refusal of held-out seeds, the report on nothing measured.
(The launcher that runs them is tested in tests/sweeps.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from study.phases import heldout


def test_held_out_seeds_need_a_committed_registration(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no committed registration"):
        heldout.heldout_jobs(tmp_path / "registration.json")
    uncommitted = tmp_path / "registration.json"
    uncommitted.write_text("{}")
    with pytest.raises(SystemExit, match="no committed registration"):
        heldout.heldout_jobs(uncommitted)


def test_the_corpus_refuses_held_out_seeds() -> None:
    from study.phases.corpus import _job

    with pytest.raises(ValueError, match="held-out seed"):
        _job("hard", "sort", "hard", 100)


def test_registered_runs_refuse_a_tree_with_uncommitted_changes(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from study.checkout import require_clean_tree

    git = lambda *args: subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "code")
    assert len(require_clean_tree("a test", tmp_path)) == 40
    (tmp_path / "code.py").write_text("x = 2\n")
    with pytest.raises(SystemExit, match="uncommitted changes"):
        require_clean_tree("a test", tmp_path)
    # the held-out test asks before it starts a run
    asked = []
    monkeypatch.setattr(heldout, "require_clean_tree", lambda what: asked.append(what) or (_ for _ in ()).throw(
        SystemExit("dirty")))
    with pytest.raises(SystemExit, match="dirty"):
        heldout.main(["run"])
    assert asked == ["the held-out test"]


def test_the_report_counts_a_target_on_nothing_measured_as_missed(tmp_path: Path) -> None:
    text = heldout.report(folder=tmp_path)
    for targets in text.split("| target | measured | met |")[1:]:  # as registered, and with the CPU-fitted comparators
        rows = [line for line in targets.split("\n\n")[0].splitlines() if line.startswith("| ") and "---" not in line]
        assert len(rows) == 5 and all(row.endswith("| **no** |") for row in rows), targets
    assert "0 runs kept" in text and text.count("| target | measured | met |") == 2
