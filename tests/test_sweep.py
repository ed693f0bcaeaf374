"""sweep.py, the bench's front for train.py on the package's launcher: planning (names, budgets, what is finished or
resumable) on hand-made run folders, and one real tiny run that the sweep starts on a local Ray, extends by
resuming, then skips. A training function's grid is ``capgeo sweep``'s (tests/sweeps/test_cli.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import sweep
from capgeo_callbacks.run.schedule import evaluation_steps
from capgeo_callbacks.run.summary import SUMMARY_FILENAME
from capgeo_callbacks.sweeps import LOG_NAME
from tasks.budgets import budget


def test_plan_stops_at_a_fraction_of_the_budget_it_keeps(tmp_path: Path) -> None:
    plans = sweep.plan_runs(["sort", "mod"], ["easy", "hard"], ["xs"], [0, 3], tmp_path, fraction=0.01)
    assert [p.name for p in plans] == [f"{t}-{d}-xs-s{s}" for t in ("sort", "mod") for d in ("easy", "hard")
                                       for s in (0, 3)]
    for plan in plans:
        steps_budget = budget(plan.tags["task"], plan.tags["difficulty"]).max_steps
        # the schedule still spans the whole budget; the run only ends early
        assert plan.tags["max_steps"] == steps_budget and "--max-steps" not in plan.argv
        assert plan.tags["stop_at_step"] == round(0.01 * steps_budget)
        assert plan.argv[plan.argv.index("--stop-at-step") + 1] == str(plan.tags["stop_at_step"])
        assert "--eval-points" not in plan.argv and plan.state()[0] == "fresh"
    own_budget = sweep.plan_runs(["sort"], ["easy"], ["xs"], [0], tmp_path, fraction=0.25,
                                 extra_args=["--max-steps", "1000"])
    assert (own_budget[0].tags["max_steps"], own_budget[0].tags["stop_at_step"]) == (1000, 250)
    kept = sweep.plan_runs(["sort"], ["easy"], ["xs"], [0], tmp_path, extra_args=["--eval-points", "8"])
    assert kept[0].tags["max_steps"] == kept[0].tags["stop_at_step"] == budget("sort", "easy").max_steps
    assert kept[0].argv[-2:] == ("--eval-points", "8")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"tasks_": ["sorting"]}, "unknown task(s) 'sorting'; valid: copy, reverse"),
     ({"difficulties": ["extreme"]}, "valid: easy, medium, hard"),
     ({"sizes": ["giant"]}, "valid: xs, s, m"),
     ({"extra_args": ["--seed", "3"]}, "must not set --seed"),
     ({"extra_args": ["--name=x"]}, "must not set --name"),
     ({"extra_args": ["--stop-at-step", "10"]}, "must not set --stop-at-step"),
     ({"extra_args": ["--stop-at", "10"]}, "override a flag"),  # argparse abbreviation
     ({"fraction": 0.0}, "must be in (0, 1]"),
     ({"fraction": 1.5}, "must be in (0, 1]"),
     ({"extra_args": ["--bogus"]}, "unrecognized arguments: --bogus")],
)
def test_bad_arguments_are_clear_errors(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"tasks_": ["sort"], "difficulties": ["easy"], "sizes": ["xs"], "seeds": [0],
                            "logdir": tmp_path, **kwargs}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sweep.plan_runs(**args)


def test_cli_error_names_valid_choices_and_dry_run_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        sweep.main(["--tasks", "sort", "--sizes", "huge", "--logdir", str(tmp_path)])
    assert "unknown size(s) 'huge'; valid: xs, s, m, l, xl, xxl" in capsys.readouterr().err
    stop = round(0.01 * budget("sort", "hard").max_steps)
    finished = tmp_path / "sort-hard-xs-s0" / "version_0"
    finished.mkdir(parents=True)
    (finished / SUMMARY_FILENAME).write_text(json.dumps({"steps": stop}))
    assert sweep.main(["--tasks", "sort", "--sizes", "xs", "--seeds", "0", "1", "--logdir", str(tmp_path),
                       "--fraction", "0.01", "--dry-run"]) == []
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[1/2] sort-hard-xs-s0") and " skip " in lines[0]
    assert lines[1].startswith("[2/2] sort-hard-xs-s1") and " run " in lines[1] and f"--stop-at-step {stop}" in lines[1]
    assert f"steps {stop} of {budget('sort', 'hard').max_steps}; train.py --task sort" in lines[1]
    assert not (tmp_path / "sort-hard-xs-s1").exists()


def test_a_function_is_swept_by_the_package_s_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        sweep.main(["--tasks", "sort", "--function", "examples.sweep_function:train"])
    assert "unrecognized arguments: --function" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sweep.main(["--help"])
    assert "capgeo sweep MODULE:FUNCTION" in capsys.readouterr().out


@pytest.mark.slow
def test_real_run_is_started_resumed_and_skipped(local_ray: None, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    def sweep_args(logdir: Path, *flags: str) -> list[str]:
        return ["--tasks", "sort", "--difficulties", "easy", "--sizes", "xs", "--logdir", str(logdir),
                "--threads", "1", *flags, "--extra-args", "--max-steps", "32", "--eval-points", "8",
                "--measures", "rankme"]
    run_root = tmp_path / "sweep" / "sort-easy-xs-s0"

    # the first half of a 32-step run: its schedule and evaluation cadence are the whole run's
    first = sweep.main(sweep_args(tmp_path / "sweep", "--fraction", "0.5"))
    assert [o.action for o in first] == ["done"]
    assert (first[0].summary["steps"], first[0].summary["max_steps"]) == (16, 32)
    assert "done" in capsys.readouterr().out

    # the whole budget: the stopped run is extended from its last checkpoint, in the same version folder
    second = sweep.main(sweep_args(tmp_path / "sweep"))
    assert [o.action for o in second] == ["resumed"]
    assert [p.name for p in run_root.glob("version_*")] == ["version_0"]
    summary = json.loads((run_root / "version_0" / SUMMARY_FILENAME).read_text())
    assert summary["steps"] == 32 and summary["threads"] == 1
    steps = [point[0] for point in summary["series"]["acc"]]
    # the first part's history survived the resume, no gap: the default (geometric) schedule from step 0
    assert steps == evaluation_steps(32, 8)
    log = (run_root / LOG_NAME).read_text()
    assert "OMP_NUM_THREADS=1" in log and log.count("--resume") == 1

    third = sweep.main(sweep_args(tmp_path / "sweep"))
    assert [o.action for o in third] == ["skipped"]
    assert "skipped (finished: version_0: 32 steps)" in capsys.readouterr().out

    # stopping at half and resuming is the same training as one unbroken run
    whole = sweep.main(sweep_args(tmp_path / "whole"))
    assert [o.action for o in whole] == ["done"]
    assert whole[0].summary["series"] == summary["series"]
    stopped_weights = torch.load(run_root / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    whole_weights = torch.load(tmp_path / "whole" / "sort-easy-xs-s0" / "version_0" / "checkpoints" / "last.ckpt",
                               weights_only=False)["state_dict"]
    assert stopped_weights.keys() == whole_weights.keys()
    assert all(torch.equal(stopped_weights[k], whole_weights[k]) for k in whole_weights)


def test_a_bad_address_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="cannot reach a Ray cluster at --address 127.0.0.1:9"):
        sweep.main(["--tasks", "sort", "--logdir", str(tmp_path), "--address", "127.0.0.1:9"])
    with pytest.raises(SystemExit):
        sweep.main(["--tasks", "sort", "--logdir", str(tmp_path), "--address", "auto", "--engine", "submitit"])
    assert "--address joins a Ray cluster: it needs --engine ray" in capsys.readouterr().err
