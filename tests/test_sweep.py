"""sweep.py and the one definition of finished (launch.run_state): planning (names, budgets, what is finished or
resumable) on hand-made run folders, and one real tiny run that the sweep starts on a local Ray, extends by
resuming, then skips; a training function's grid on the command line (--function, --grid) and its errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import sweep
from capgeo_callbacks.run.schedule import evaluation_steps
from capgeo_callbacks.run.summary import SUMMARY_FILENAME
from launch import run_state
from tasks.budgets import budget


def make_version(run_root: Path, version: int, summary: dict[str, Any] | None = None, ckpt: bool = False) -> Path:
    folder = run_root / f"version_{version}"
    folder.mkdir(parents=True)
    if summary is not None:
        (folder / SUMMARY_FILENAME).write_text(json.dumps(summary))
    if ckpt:
        (folder / "checkpoints").mkdir()
        (folder / "checkpoints" / "last.ckpt").write_bytes(b"")
    return folder


def test_run_state_reads_the_run_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert run_state(run, 40) == ("fresh", "new run")
    make_version(run, 0, {"steps": 20, "acquisition_step": 10, "labels": {"full_step": 15}}, ckpt=True)
    assert run_state(run, 40)[0] == "resume"  # budget not reached: continue from last.ckpt
    assert run_state(run, 20)[0] == "finished"
    assert run_state(run, 40, stop_when_learned=True)[0] == "finished"
    # a newer attempt killed before its first checkpoint: --resume would find nothing, so start afresh
    make_version(run, 1)
    assert run_state(run, 40) == ("fresh", "no checkpoint")
    # ... but an older finished summary still counts
    assert run_state(run, 20) == ("finished", "version_0: 20 steps")
    # a capability stopper ended it (the launcher records why): finished, whatever its steps
    stopped = tmp_path / "stopped"
    make_version(stopped, 0, {"steps": 12, "stopped": {"by": "CapabilityStopper", "step": 12, "reason": "no onset"}},
                 ckpt=True)
    assert run_state(stopped, 40) == ("finished", "version_0: stopped at step 12 (no onset)")
    # killed mid-run: checkpoint, no summary (version_10 sorts after version_1 by number, not by text)
    make_version(run, 10, ckpt=True)
    assert run_state(run, 40) == ("resume", "version_10/checkpoints/last.ckpt")
    (run / "version_10" / SUMMARY_FILENAME).write_text("{cut short")  # a crash while writing: ignored
    assert run_state(run, 40)[0] == "resume"


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
    make_version(tmp_path / "sort-hard-xs-s0", 0, {"steps": stop}, ckpt=True)
    assert sweep.main(["--tasks", "sort", "--sizes", "xs", "--seeds", "0", "1", "--logdir", str(tmp_path),
                       "--fraction", "0.01", "--dry-run"]) == []
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[1/2] sort-hard-xs-s0") and " skip " in lines[0]
    assert lines[1].startswith("[2/2] sort-hard-xs-s1") and " run " in lines[1] and f"--stop-at-step {stop}" in lines[1]
    assert not (tmp_path / "sort-hard-xs-s1").exists()


def test_threads_per_run_shares_the_cores() -> None:
    assert sweep.threads_per_run(jobs=2, cores=2) == 1
    assert sweep.threads_per_run(jobs=1, cores=8) == 8
    assert sweep.threads_per_run(jobs=4, cores=2) == 1
    assert sweep.threads_per_run(jobs=1, threads=3, cores=8) == 3


@pytest.mark.slow
def test_real_run_is_started_resumed_and_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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
    log = (run_root / sweep.LOG_NAME).read_text()
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


def test_a_grid_reads_values_as_json_else_as_strings() -> None:
    assert sweep.parse_grid(["lr=0.001,3e-3", "seed=0,1", "wd=true,null", "family=recall,sum3"]) == {
        "lr": [0.001, 0.003], "seed": [0, 1], "wd": [True, None], "family": ["recall", "sum3"]}


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--grid", "seed=0", "--seeds", "1"], "--seeds apply to train.py sweeps (--tasks), not to --function"),
     (["--grid", "seed=0", "--extra-args", "--measures", "none"], "--extra-args apply to train.py sweeps"),
     (["--grid", "seed"], "--grid takes KEY=V1,V2,... items, got 'seed'"),
     (["--grid", "seed=0,", "lr=1"], "--grid 'seed=0,' has an empty value"),
     (["--grid", "seed=0", "seed=1"], "--grid gives 'seed' twice"),
     (["--grid", "trial_dir=a"], "grid key 'trial_dir' is reserved"),
     (["--grid", "seed=0", "--function", "examples.sweep_function:nothing"], "has no 'nothing'")],
)
def test_function_sweep_errors_come_before_any_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   flags: list[str], message: str) -> None:
    with pytest.raises(SystemExit):
        sweep.main(["--function", "examples.sweep_function:train", "--logdir", str(tmp_path), *flags])
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_grid_needs_a_function_and_a_function_takes_no_tasks(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        sweep.main(["--tasks", "sort", "--grid", "seed=0", "--logdir", str(tmp_path)])
    assert "--grid gives a training function's settings: it needs --function" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sweep.main(["--tasks", "sort", "--function", "examples.sweep_function:train", "--logdir", str(tmp_path)])
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_function_sweep_dry_run_lists_its_grid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sweep.main(["--function", "examples.sweep_function:train", "--grid", "lr=0.002,0.004", "seed=0,1",
                       "--logdir", str(tmp_path), "--dry-run"]) == []
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == ["lr=0.002,seed=0", "lr=0.002,seed=1", "lr=0.004,seed=0",
                                                   "lr=0.004,seed=1"]
    assert " run " in lines[0] and "(new run)" in lines[0]
    config = json.loads(lines[3].split("examples.sweep_function:train(", 1)[1].removesuffix(")"))
    assert config == {"lr": 0.004, "seed": 1, "trial_dir": str(tmp_path.absolute() / "lr=0.004,seed=1"),
                      "resume_from": None}
    assert not any(tmp_path.iterdir())
