"""The study's held-out policy (study.heldout), applied before any run reaches the scorer: held-out seeds count only
under a registration committed before the run; and train.py runs what the registration freezes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import train
from capgeo_callbacks.scoring import load_runs
from study.heldout import REGISTRATION, held_out_check, registered_rules, sha256
from tests.scoring.test_scores import ACQUIRED, write_run


def test_held_out_runs_need_a_matching_registration_committed_before_them(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = lambda *args: subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,  # noqa: E731
                                       text=True).stdout.strip()
    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    (repo / "a.txt").write_text("before")
    git("add", "a.txt")
    git("commit", "-qm", "before")
    before = git("rev-parse", "HEAD")
    registration = repo / "registration.json"
    registration.write_text(json.dumps({"warning": "x"}))
    git("add", "registration.json")
    git("commit", "-qm", "register")
    after = git("rev-parse", "HEAD")
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


def test_train_py_takes_the_study_s_registration() -> None:
    assert train.REGISTRATION == REGISTRATION and train.registered_rules is registered_rules
    rules, record = registered_rules(REGISTRATION)
    frozen = json.loads(REGISTRATION.read_text())
    assert [rule.name for rule in rules] == [frozen["warning"]["name"], frozen["forecaster"]["name"]]
    assert record is not None and record["sha256"] == sha256(REGISTRATION)
    assert registered_rules("none") == ([], None)
