"""The launcher on its real engines, with tiny train.py runs (the bench's command trials, sweep.TrainTrial): a local Ray
(2 CPUs, one for the folder: conftest) runs a 2 x 2 grid and skips it on a second call; a trial killed mid-run
resumes from its checkpoint while a crashing one is reported and the others go on; submitit's local executor runs a
grid; bad input is a clear message."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from lightning.pytorch.callbacks import Callback

from capgeo_callbacks.run.schedule import evaluation_steps
from capgeo_callbacks.run.summary import SUMMARY_FILENAME
from capgeo_callbacks.sweeps import LOG_NAME, launch, run_state
from capgeo_callbacks.sweeps.engines import start_ray
from sweep import TrainTrial

pytestmark = pytest.mark.slow

TINY = ("--difficulty", "easy", "--max-steps", "6", "--eval-points", "3", "--measures", "none")


def tiny(logdir: Path, task: str, seed: int, *extra: str) -> TrainTrial:
    return TrainTrial(f"{task}-s{seed}", ("--task", task, *TINY, "--seed", str(seed), *extra), logdir=logdir)


def summary(trial: TrainTrial) -> dict[str, Any]:
    [path] = trial.root.glob(f"version_*/{SUMMARY_FILENAME}")
    return json.loads(path.read_text())


def test_a_grid_runs_on_a_local_ray_and_a_second_call_skips_it(local_ray: None, tmp_path: Path) -> None:
    trials = [tiny(tmp_path, task, seed) for task in ("copy", "reverse") for seed in (0, 1)]
    first = launch(trials, engine="ray", jobs=2, storage=tmp_path / ".engine")
    assert [o.action for o in first] == ["done"] * 4, [o.message for o in first]
    for trial in trials:
        found = summary(trial)
        assert found["steps"] == 6 and found["threads"] == 1 and found["omp_num_threads"] == "1"
        assert found["commit"]  # provenance reached the trial (git here, or CAPGEO_COMMIT from the launcher)
        assert (trial.root / LOG_NAME).read_text().startswith("\n$ OMP_NUM_THREADS=1 train.py --task")
    # each evaluation reached Tune (Tune's own result files, beside the run folders, not in them)
    reports = [json.loads(line) for path in sorted((tmp_path / ".engine").rglob("result.json"))
               for line in path.read_text().splitlines()]
    evaluations = [r for r in reports if "val/acc" in r]
    assert len(evaluations) == sum(len(summary(t)["series"]["acc"]) for t in trials)
    assert all(r["capgeo/info"]["max_steps"] == 6 for r in evaluations)
    again = launch(trials, engine="ray", jobs=2)
    assert [o.action for o in again] == ["skipped"] * 4
    assert all(len(list(t.root.glob("version_*"))) == 1 for t in trials)


def test_a_killed_trial_resumes_and_a_crashing_one_fails_alone(local_ray: None, tmp_path: Path) -> None:
    long = ("--max-steps", "40", "--eval-points", "40")  # last.ckpt after the 16th evaluation
    killed, crashing, plain = (tiny(tmp_path, "copy", 0, *long), tiny(tmp_path, "reverse", 0),
                               tiny(tmp_path, "copy", 1))

    class KillAfterCheckpoint(Callback):  # the process dies as a preempted node's would: no summary, no cleanup
        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.global_step >= 24:
                os.kill(os.getpid(), signal.SIGKILL)

    class Crash(Callback):
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            raise RuntimeError("a bug in this run")

    def sabotage(trial: TrainTrial) -> Sequence[Callback]:
        return {killed.name: [KillAfterCheckpoint()], crashing.name: [Crash()]}.get(trial.name, [])

    first = {o.trial.name: o for o in launch([killed, crashing, plain], engine="ray", jobs=2, callbacks=sabotage)}
    assert first[plain.name].action == "done"
    assert first[crashing.name].action == "failed"
    assert f"trial {crashing.key} failed: RuntimeError: a bug in this run" in first[crashing.name].message
    assert first[killed.name].action in ("failed", "not finished")
    assert run_state(killed.root, 40)[0] == "resume"

    second = {o.trial.name: o for o in launch([killed, crashing, plain], engine="ray", jobs=2)}
    assert (second[killed.name].action, second[crashing.name].action, second[plain.name].action) == \
        ("resumed", "done", "skipped")
    resumed = summary(killed)
    assert resumed["steps"] == 40 and resumed["resumes"] == 1
    assert [p[0] for p in resumed["series"]["acc"]] == evaluation_steps(40, 40)  # no gap, nothing repeated
    assert (killed.root / LOG_NAME).read_text().count("--resume") == 1


def test_submitits_local_executor_runs_a_grid(tmp_path: Path) -> None:
    pytest.importorskip("submitit")
    trials = [tiny(tmp_path, "copy", seed) for seed in (0, 1)]
    first = launch(trials, engine="submitit", cluster="local", jobs=2, storage=tmp_path / ".submitit")
    assert [o.action for o in first] == ["done", "done"], [o.message for o in first]
    assert all(summary(t)["steps"] == 6 and summary(t)["threads"] == 1 for t in trials)
    assert [o.action for o in launch(trials, engine="submitit", cluster="local", jobs=2)] == ["skipped"] * 2


def test_bad_input_is_named_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown engine 'spark'; valid: ray, submitit"):
        launch([tiny(tmp_path, "copy", 0)], engine="spark")
    with pytest.raises(ValueError, match="train.py rejected .*--max-steps must be at least 1"):
        launch([TrainTrial("bad", ("--task", "copy", "--max-steps", "0"), logdir=tmp_path)])
    with pytest.raises(ValueError, match="must not set --resume"):
        TrainTrial("bad", ("--task", "copy", "--resume"), logdir=tmp_path)
    with pytest.raises(ValueError, match="folders must be unique"):
        launch([tiny(tmp_path, "copy", 0), tiny(tmp_path, "copy", 0)])
    with pytest.raises(SystemExit, match="cannot reach a Ray cluster at --address 127.0.0.1:9"):
        start_ray("127.0.0.1:9")
    assert not any(tmp_path.iterdir())


def test_a_run_the_capability_stopper_ended_is_finished(tmp_path: Path) -> None:
    from capgeo_callbacks.callbacks.capability_stopper import CapabilityStopper
    from capgeo_callbacks.sweeps import run_trial

    shuffled = TrainTrial("shuffled", ("--task", "copy", "--difficulty", "easy", "--max-steps", "200", "--eval-points",
                                  "40", "--measures", "none", "--shuffle-answers"), logdir=tmp_path)
    result = run_trial(shuffled, callbacks=[CapabilityStopper()])
    stopped = summary(shuffled)["stopped"]
    assert result["action"] == "done" and stopped["by"] == "CapabilityStopper" and stopped["step"] == 50
    assert stopped["reason"].startswith("no learning onset (loss-onset) by step 50")
    assert shuffled.state() == ("finished", f"version_0: stopped at step 50 ({stopped['reason']})")
    assert run_trial(shuffled)["action"] == "skipped"  # a later launch, without the stopper, does not resume it
