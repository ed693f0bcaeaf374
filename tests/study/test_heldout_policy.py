"""The study's held-out policy (study.registrations.policy), applied before any run reaches the scorer: held-out seeds
count only under a registration committed before the run; and train.py runs what the registration freezes."""

from __future__ import annotations

import json
from pathlib import Path

import train_cli
from capgeo_callbacks.scoring import load_runs
from study.registrations.forecast import REGISTRATION
from study.registrations.policy import held_out_check, registered_before, sha256
from tests.scoring.test_scores import ACQUIRED, write_run
from tests.study.helpers import repo_with_registration


def test_held_out_runs_need_a_matching_registration_committed_before_them(tmp_path: Path) -> None:
    registration, before, after = repo_with_registration(tmp_path / "repo", "registration.json",
                                                         json.dumps({"warning": "x"}))
    digest = sha256(registration)
    runs_dir = tmp_path / "runs"
    write_run(runs_dir, "calibration", ACQUIRED, seed=1)
    write_run(runs_dir, "good", ACQUIRED, seed=100, registration={"sha256": digest}, commit=after)
    write_run(runs_dir, "early", ACQUIRED, seed=101, registration={"sha256": digest}, commit=before)
    write_run(runs_dir, "other", ACQUIRED, seed=102, registration={"sha256": "0" * 64}, commit=after)
    kept, dropped = held_out_check(load_runs(runs_dir), registration)
    assert sorted(run.name.split("/")[-2] for run in kept) == ["calibration", "good"]
    assert len(dropped) == 2 and any("does not contain the registration" in d for d in dropped)
    kept, dropped = held_out_check(load_runs(runs_dir), None)
    assert [run.name.split("/")[-2] for run in kept] == ["calibration"]


def test_a_moved_registration_still_binds_the_runs_made_before_the_move(tmp_path: Path) -> None:
    import subprocess

    registration, before, after = repo_with_registration(tmp_path / "repo", "registration.json", "{}")
    root = tmp_path / "repo"
    (root / "study").mkdir()
    subprocess.run(["git", "mv", "registration.json", "study/registration.json"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "move"], cwd=root, check=True)
    moved = root / "study" / "registration.json"
    assert registered_before(moved, after) and not registered_before(moved, before)
    assert not registered_before(moved, None)


def test_train_py_takes_the_study_s_registration_as_data() -> None:
    assert train_cli.REGISTRATION == REGISTRATION  # the same file: train.py reads it, and imports nothing of the study
    rules, record = train_cli.registered_rules(REGISTRATION)
    frozen = json.loads(REGISTRATION.read_text())
    assert [rule.name for rule in rules] == [frozen["warning"]["name"], frozen["forecaster"]["name"]]
    assert record is not None and record["sha256"] == sha256(REGISTRATION)
    assert train_cli.registered_rules("none") == ([], None)
