"""capgeo_callbacks.run.reading: the one reader of run folders (versions, the newest summary, packed corpus files)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from capgeo_callbacks.run.reading import (
    find_run_summary,
    find_runs,
    newest_summary,
    newest_version,
    read_run,
    version_number,
    versions,
)
from capgeo_callbacks.run.summary import SUMMARY_FILENAME


def write_run(root: Path, name: str, summary: dict, version: int | None = 0) -> Path:
    folder = root / name if version is None else root / name / f"version_{version}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SUMMARY_FILENAME).write_text(json.dumps(summary))
    return folder / SUMMARY_FILENAME


def test_versions_newest_first_by_number(tmp_path: Path) -> None:
    for name in ("version_2", "version_10", "version_x", "other"):
        (tmp_path / name).mkdir()
    (tmp_path / "version_3").write_text("a file, not a version")
    assert [p.name for p in versions(tmp_path)] == ["version_10", "version_2"]
    assert newest_version(tmp_path) == tmp_path / "version_10"
    assert newest_version(tmp_path / "missing") is None and versions(tmp_path / "missing") == []
    assert version_number("runs/x/version_7") == 7 and version_number("version_") is None


def test_newest_summary_skips_a_version_cut_short(tmp_path: Path) -> None:
    write_run(tmp_path, "run", {"steps": 10}, version=0)
    write_run(tmp_path, "run", {"steps": 20}, version=1)
    (tmp_path / "run" / "version_2").mkdir()  # killed before its summary
    (tmp_path / "run" / "version_3").mkdir()
    (tmp_path / "run" / "version_3" / SUMMARY_FILENAME).write_text("{cut")
    assert newest_summary(tmp_path / "run") == {"steps": 20}
    assert newest_summary(tmp_path / "nothing") is None


def test_find_runs_takes_the_newest_version_with_a_summary(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "runs"
    write_run(root, "mod-hard-xs-s0", {"task": "mod", "steps": 10}, version=0)
    write_run(root, "mod-hard-xs-s0", {"task": "mod", "steps": 20}, version=1)
    (root / "mod-hard-xs-s0" / "version_2").mkdir()  # a later run killed before writing its summary
    broken = root / "other" / "version_0" / SUMMARY_FILENAME
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")
    records = find_runs(root)
    assert [(r.name, r.version, r.summary["steps"]) for r in records] == [("mod-hard-xs-s0", "version_1", 20)]
    assert "not a readable summary" in caplog.text
    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_runs(tmp_path / "missing")


def test_find_runs_reads_packed_corpus_files_and_plain_run_folders(tmp_path: Path) -> None:
    for name, seed in (("hard/sort-hard-xs-s1", 1), ("hard/sort-hard-xs-s0", 0)):
        path = tmp_path / f"{name}.json.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt") as handle:
            json.dump({"task": "sort", "difficulty": "hard", "seed": seed}, handle)
    write_run(tmp_path, "own/trainer", {"task": "copy", "difficulty": "easy"}, version=None)
    records = find_runs(tmp_path)
    # sorted for display: task, difficulty, parameters, seed
    assert [(r.name, r.version) for r in records] == [
        ("own/trainer", None), ("hard/sort-hard-xs-s0", None), ("hard/sort-hard-xs-s1", None)]
    assert read_run(records[1].path).name == "sort-hard-xs-s0"


def test_find_run_summary_beside_a_checkpoint(tmp_path: Path) -> None:
    summary = write_run(tmp_path, "run", {"steps": 1})
    checkpoint = summary.parent / "checkpoints" / "last.ckpt"
    checkpoint.parent.mkdir()
    assert find_run_summary(checkpoint) == summary
    assert find_run_summary(summary.parent / "last.ckpt") == summary
    assert find_run_summary(tmp_path / "elsewhere" / "x.ckpt") is None
