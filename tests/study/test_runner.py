"""The study's runner (real train.py runs, tiny) and the held-out gate."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from study import heldout
from study.runner import Job, run_jobs, summary_of

TINY = ("--task", "copy", "--difficulty", "easy", "--max-steps", "6", "--eval-points", "3", "--measures", "none")


def test_jobs_run_side_by_side_skip_when_finished_and_respect_a_deadline(tmp_path: Path) -> None:
    jobs = [Job(f"tiny-{seed}", (*TINY, "--seed", str(seed)), tmp_path) for seed in (0, 1)]
    assert run_jobs(jobs, workers=2) == {"tiny-0": "done", "tiny-1": "done"}
    assert all(summary_of(job)["steps"] == 6 for job in jobs)
    assert run_jobs(jobs, workers=2) == {"tiny-0": "skipped", "tiny-1": "skipped"}
    late = [Job("late", TINY, tmp_path)]
    assert run_jobs(late, workers=1, deadline=time.time() - 1) == {"late": "not started"}
    with pytest.raises(ValueError, match="unique"):
        run_jobs([jobs[0], jobs[0]], workers=1)


def test_held_out_seeds_need_a_committed_registration(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no committed registration"):
        heldout.heldout_jobs(tmp_path / "registration.json")
    uncommitted = tmp_path / "registration.json"
    uncommitted.write_text("{}")
    with pytest.raises(SystemExit, match="no committed registration"):
        heldout.heldout_jobs(uncommitted)


def test_registered_runs_refuse_a_tree_with_uncommitted_changes(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from study.runner import require_clean_tree

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


def test_the_corpus_refuses_held_out_seeds() -> None:
    from study.corpus import _job

    with pytest.raises(ValueError, match="held-out seed"):
        _job("hard", "sort", "hard", 100)


def test_the_report_counts_a_target_on_nothing_measured_as_missed(tmp_path: Path) -> None:
    text = heldout.report(folder=tmp_path)
    for targets in text.split("| target | measured | met |")[1:]:  # as registered, and with the CPU-fitted comparators
        rows = [line for line in targets.split("\n\n")[0].splitlines() if line.startswith("| ") and "---" not in line]
        assert len(rows) == 5 and all(row.endswith("| **no** |") for row in rows), targets
    assert "0 runs kept" in text and text.count("| target | measured | met |") == 2


def test_a_name_repeated_across_folders_still_runs_workers_at_a_time(tmp_path: Path) -> None:
    # the ablation's layout: one run name under each schedule's folder
    jobs = [Job("tiny", (*TINY, "--seed", "0"), tmp_path / folder) for folder in ("a", "b", "c")]
    assert run_jobs(jobs, workers=1) == {"a/tiny": "done", "b/tiny": "done", "c/tiny": "done"}
    spans = []
    for job in jobs:
        [path] = job.root.glob("version_*/capgeo_summary.json")
        ended = path.stat().st_mtime
        spans.append((ended - summary_of(job)["wall_seconds"], ended))
    spans.sort()
    assert all(later[0] >= earlier[1] - 1.0 for earlier, later in zip(spans, spans[1:], strict=False)), spans
