"""The launcher on a user's training function (capgeo_callbacks.sweeps.functions; examples/sweep_function.py,
docs/sweeps.md): what a function trial's folder says (finished, resumable, fresh), bad input named before anything
runs, and on the real engines a 2 x 2 grid run and then skipped, a killed trial resumed at its checkpoint with the
series of an unbroken run, and the grid on submitit's local executor."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from capgeo_callbacks.run.schedule import evaluation_steps
from capgeo_callbacks.run.summary import SUMMARY_FILENAME
from capgeo_callbacks.sweeps import LOG_NAME, TRIAL_RECORD, FunctionTrial, function_trials, launch, run_state
from capgeo_callbacks.sweeps.trials import read_trial_record, summary_of
from examples.sweep_function import train

STEPS = 40
GRID = {"lr": [0.002, 0.004], "seed": [0, 1], "max_steps": [STEPS]}
DIE_FROM = 20


def die_after_a_checkpoint(config: dict[str, Any]) -> None:
    """examples/sweep_function.train on a node that dies (SIGKILL: no summary, no cleanup) right after the first
    checkpoint saved from step 20 on, as a preempted node's would."""
    save = ModelCheckpoint.on_validation_end

    def save_then_die(self: ModelCheckpoint, trainer: Any, pl_module: Any) -> None:
        save(self, trainer, pl_module)
        if trainer.global_step >= DIE_FROM:
            os.kill(os.getpid(), signal.SIGKILL)

    ModelCheckpoint.on_validation_end = save_then_die  # this process only, and it dies
    train(config)


def two_arguments(config: dict[str, Any], extra: int) -> None:
    """Not a training function: it needs a second argument."""


def summary(trial: FunctionTrial) -> dict[str, Any]:
    found = summary_of(trial)
    assert found is not None, f"{trial.key} has no summary"
    return found


def write_summary(folder: Path, **fields: Any) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SUMMARY_FILENAME).write_text(json.dumps(fields))


def test_what_a_function_trials_folder_says(tmp_path: Path) -> None:
    root = tmp_path / "trial"
    assert run_state(root, function=True) == ("fresh", "new run")
    (root / "lightning_logs" / "version_0").mkdir(parents=True)
    assert run_state(root, function=True) == ("fresh", "no checkpoint")
    (root / "checkpoints").mkdir()
    (root / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert run_state(root, function=True) == ("resume", "checkpoints/last.ckpt")
    # a summary that records no budget does not finish the run; one that reached its budget does
    write_summary(root / "lightning_logs" / "version_0", steps=40)
    assert run_state(root, function=True)[0] == "resume"
    write_summary(root / "lightning_logs" / "version_0", steps=40, max_steps=40)
    assert run_state(root, function=True) == ("finished", "lightning_logs/version_0: 40 steps")
    # the newest summary decides: a resumed start that has not yet reached its budget
    write_summary(root / "lightning_logs" / "version_1", steps=30, max_steps=60)
    assert run_state(root, function=True) == ("resume", "checkpoints/last.ckpt")
    write_summary(root / "lightning_logs" / "version_1", steps=30, max_steps=60, stopped={"reason": "no onset"})
    assert run_state(root, function=True) == ("finished", "lightning_logs/version_1: stopped at step 30 (no onset)")
    # once the function has returned (the launcher's record), the trial is finished whatever its summaries say
    other = tmp_path / "returned"
    other.mkdir()
    (other / TRIAL_RECORD).write_text(json.dumps({"returned": True, "parts": []}))
    assert run_state(other, function=True) == ("finished", f"{TRIAL_RECORD}: the function returned")


def test_bad_input_is_named_before_anything_runs(tmp_path: Path) -> None:
    fn = "examples.sweep_function:train"
    with pytest.raises(ValueError, match="grid key 'trial_dir' is reserved: the launcher sets config"):
        function_trials(fn, {"trial_dir": ["x"], "seed": [0]}, tmp_path)
    with pytest.raises(ValueError, match="setting 'resume_from' is reserved"):
        FunctionTrial("t", fn, {"resume_from": "x"}, logdir=tmp_path)
    with pytest.raises(ValueError, match="named 'package.module:function', got 'examples.sweep_function.train'"):
        function_trials("examples.sweep_function.train", {"seed": [0]}, tmp_path)
    with pytest.raises(ValueError, match="cannot import 'examples.no_such_module'"):
        function_trials("examples.no_such_module:train", {"seed": [0]}, tmp_path)
    with pytest.raises(ValueError, match="examples.sweep_function has no 'trian'"):
        function_trials("examples.sweep_function:trian", {"seed": [0]}, tmp_path)
    with pytest.raises(ValueError, match="is not callable"):
        function_trials("examples.sweep_function:__doc__", {"seed": [0]}, tmp_path)
    with pytest.raises(ValueError, match="must take one argument, the trial's config"):
        function_trials(two_arguments, {"seed": [0]}, tmp_path)
    with pytest.raises(ValueError, match="grid 'seed' has no values"):
        function_trials(fn, {"seed": []}, tmp_path)
    with pytest.raises(ValueError, match="grid 'lr': a list of values"):
        function_trials(fn, {"lr": 0.1}, tmp_path)
    with pytest.raises(ValueError, match="grid points share a folder name: tag=a_b"):
        function_trials(fn, {"tag": ["a/b", "a b"]}, tmp_path)
    trials = function_trials(fn, GRID, tmp_path)
    with pytest.raises(ValueError, match="a training function builds its own Trainer"):
        launch(trials, callbacks=lambda trial: [])
    with pytest.raises(ValueError, match="cannot import"):  # a trial built by hand is checked at launch
        launch([FunctionTrial("t", "examples.no_such_module:train", {}, logdir=tmp_path)])
    assert not any(tmp_path.iterdir())


def test_a_grid_is_named_by_its_points_in_order(tmp_path: Path) -> None:
    trials = function_trials(train, GRID, tmp_path)
    assert [t.name for t in trials] == ["lr=0.002,seed=0,max_steps=40", "lr=0.002,seed=1,max_steps=40",
                                        "lr=0.004,seed=0,max_steps=40", "lr=0.004,seed=1,max_steps=40"]
    assert trials[1].config(resume=False) == {"lr": 0.002, "seed": 1, "max_steps": STEPS,
                                              "trial_dir": str(tmp_path.absolute() / trials[1].name),
                                              "resume_from": None}
    assert trials[1].config(resume=True)["resume_from"] == str(trials[1].root / "checkpoints" / "last.ckpt")


def test_the_docs_show_the_example_function_as_it_is() -> None:
    root = Path(__file__).resolve().parents[2]
    docs = (root / "docs" / "sweeps.md").read_text()
    [block] = [b for b in re.findall(r"```python\n(.*?)```", docs, flags=re.DOTALL) if "def train(config" in b]
    source = (root / "examples" / "sweep_function.py").read_text()
    assert source.endswith(block) and "capgeo_callbacks.sweeps" not in block


def check_ran(trial: FunctionTrial, resumes: int = 0) -> dict[str, Any]:
    """What every function trial that ran to its end leaves: its summary, its record, its log."""
    found = summary(trial)
    assert found["steps"] == STEPS
    assert [point[0] for point in found["series"]["acc"]] == evaluation_steps(STEPS, 32)  # no gap, nothing repeated
    record = read_trial_record(trial.root)
    assert record is not None and record["returned"] and len(record["parts"]) == resumes + 1
    assert (record["threads"], record["omp_num_threads"]) == (1, "1")
    assert record["commit"] and record["function"].endswith(":train") and record["settings"] == trial.settings
    log = (trial.root / LOG_NAME).read_text()
    assert re.match(r"\n\$ OMP_NUM_THREADS=1 [\w.]+:[\w_]+\(\{", log), log[:200]
    return found


@pytest.mark.slow
def test_a_grid_of_a_function_runs_on_a_local_ray_and_a_second_call_skips_it(local_ray: None, tmp_path: Path) -> None:
    trials = function_trials("examples.sweep_function:train", GRID, tmp_path / "grid")
    first = launch(trials, engine="ray", jobs=2, storage=tmp_path / ".engine")
    assert [o.action for o in first] == ["done"] * 4, [o.message for o in first]
    series = [check_ran(trial)["series"] for trial in trials]
    assert series[0] != series[2]  # the settings reached the function
    assert all(o.summary and o.summary["steps"] == STEPS for o in first)
    again = launch(trials, engine="ray", jobs=2, storage=tmp_path / ".engine")
    returned = ("skipped", f"finished: {TRIAL_RECORD}: the function returned")
    assert [(o.action, o.message) for o in again] == [returned] * 4
    assert all(len(read_trial_record(t.root)["parts"]) == 1 for t in trials)


@pytest.mark.slow
def test_a_killed_function_trial_resumes_at_its_checkpoint(local_ray: None, tmp_path: Path) -> None:
    point = {"lr": 0.004, "seed": 0, "max_steps": STEPS}
    killed = FunctionTrial("killed", die_after_a_checkpoint, point, logdir=tmp_path)
    [first] = launch([killed], engine="ray", storage=tmp_path / ".engine")
    assert first.action in ("failed", "not finished")
    assert run_state(killed.root, function=True) == ("resume", "checkpoints/last.ckpt")
    saved_at = torch.load(killed.root / "checkpoints" / "last.ckpt", weights_only=False)["global_step"]
    assert DIE_FROM <= saved_at < STEPS
    assert summary_of(killed) is None  # no summary: it died mid-run

    resumed, unbroken = (FunctionTrial("killed", train, point, logdir=tmp_path),
                         FunctionTrial("unbroken", train, point, logdir=tmp_path))
    second = launch([resumed, unbroken], engine="ray", jobs=2, storage=tmp_path / ".engine")
    assert [o.action for o in second] == ["resumed", "done"], [o.message for o in second]
    record = read_trial_record(resumed.root)
    assert [part["resume_from"] for part in record["parts"]] == [None, str(resumed.root / "checkpoints" / "last.ckpt")]
    assert "ended" not in record["parts"][0] and record["parts"][1]["ended"] == "returned"  # the first part died
    assert check_ran(resumed, resumes=1)["series"] == check_ran(unbroken)["series"]
    assert (resumed.root / LOG_NAME).read_text().count('"resume_from": null') == 1


@pytest.mark.slow
def test_submitits_local_executor_runs_a_function_grid(tmp_path: Path) -> None:
    pytest.importorskip("submitit")
    trials = function_trials(train, GRID, tmp_path)
    first = launch(trials, engine="submitit", cluster="local", jobs=2, storage=tmp_path / ".submitit")
    assert [o.action for o in first] == ["done"] * 4, [o.message for o in first]
    assert all(check_ran(t) for t in trials)
    assert [o.action for o in launch(trials, engine="submitit", cluster="local", jobs=2)] == ["skipped"] * 4
