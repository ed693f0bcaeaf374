"""Reliability of train.py with the callbacks attached (spec §11): no observer effect, exact resume,
hooks and rows freed after every evaluation, memory flat over a long run, bad command lines."""

from __future__ import annotations

import gc
import json
import logging
import random
import tracemalloc
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn

import tasks
import train
from capgeo_callbacks import LinearProbeMonitor, MeasureCallback, RankMeMonitor
from capgeo_callbacks.run.schedule import evaluation_steps
from models import SIZES

# mod easy at size xs: last-layer RankMe collapses by step 30 and recovers by step 60, long before
# acquisition (val/acc stays below 0.1 for 200 steps); 200 steps take a few seconds.
# the overhead budget off: these runs compare series point by point, which a time-based budget would thin
TASK = ["--task", "mod", "--difficulty", "easy", "--no-progress", "--overhead-budget", "0"]
# The costly measures at settings small enough for CI, each firing at every other evaluation.
CHEAP_MEASURES: dict[str, dict[str, Any]] = {
    "grad_rank": {"every_n_evals": 2, "batch_size": 16},
    "hessian": {"every_n_evals": 2, "batch_size": 16, "k": 2, "num_iterations": 8, "trace": True,
                "trace_samples": 2},
    "llc": {"every_n_evals": 2, "num_chains": 2, "num_draws": 5, "batch_size": 16, "num_batches": 1},
    "commutator": {"every_n_evals": 2, "batch_size": 16, "num_pairs": 1},
}


@pytest.fixture
def cheap_measures(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, options in CHEAP_MEASURES.items():
        monkeypatch.setitem(train.MEASURE_OPTIONS, name, options)


def load_checkpoint(summary: dict[str, Any]) -> dict[str, Any]:
    return torch.load(Path(summary["run_dir"]) / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)


def assert_same_tensors(a: Any, b: Any, where: str = "") -> None:
    """``a`` and ``b`` are equal nested containers, with bit-identical tensors."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_same_tensors(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_tensors(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


# -- no observer effect ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_every_callback_attached_leaves_training_bit_identical(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    runs: dict[str, tuple[dict[str, Any], dict[str, Any], tuple[Any, ...]]] = {}
    for measures in ("none", "all"):
        if measures == "none":  # the plain run: no capgeo callback at all (not even the detector, always built)
            monkeypatch.setattr(train, "build_measure_callbacks", lambda *args, **kwargs: [])
        else:
            monkeypatch.undo()
            for name, options in CHEAP_MEASURES.items():
                monkeypatch.setitem(train.MEASURE_OPTIONS, name, options)
        summary = train.main([*TASK, "--max-steps", "24", "--eval-points", "6", "--measures", measures,
                              "--logdir", str(tmp_path / measures)])
        rng = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
        runs[measures] = (summary, load_checkpoint(summary), rng)

    watched = runs["all"][0]
    series = watched["series"]
    for tag in ("rankme/blocks.0", "rankme/norm_f", "ildr/blocks.0", "ildr/norm_f", "probe_acc/norm_f", "grad_erank",
                "grad_cov_rank", "hessian/eig_0", "hessian/trace", "llc", "commutator/defect"):
        assert series.get(tag), f"{tag} was never measured"
    assert [s for s, _ in series["llc"]] == evaluation_steps(24, 6)[::2]  # every other evaluation, step 0 included
    assert "series" not in runs["none"][0]  # no callback at all in the plain run

    (_, plain, plain_rng), (_, observed, observed_rng) = runs["none"], runs["all"]
    assert plain["global_step"] == observed["global_step"] == 24
    assert_same_tensors(plain["state_dict"], observed["state_dict"], "state_dict")
    assert_same_tensors(plain["optimizer_states"], observed["optimizer_states"], "optimizer_states")
    assert_same_tensors(plain["lr_schedulers"], observed["lr_schedulers"], "lr_schedulers")
    assert torch.equal(plain_rng[0], observed_rng[0])  # torch's global RNG
    assert np.array_equal(plain_rng[1], observed_rng[1]) and plain_rng[2] == observed_rng[2]


# -- resume -----------------------------------------------------------------------------------------------
class Crash(pl.Callback):
    """Fails the run at the start of training step ``step`` (after the checkpoint of an earlier evaluation)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError(f"simulated crash at step {self.step}")


def alert_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "capgeo" and "precursor alert" in r.getMessage()]


@pytest.mark.slow
def test_killed_and_resumed_run_equals_the_unbroken_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(train, "CHECKPOINT_EVERY_N_EVALS", 4)  # last.ckpt after every 4th evaluation
    args = [*TASK, "--max-steps", "200", "--eval-points", "30"]  # the default, geometric schedule
    caplog.set_level(logging.WARNING, logger="capgeo")
    unbroken = train.main([*args, "--logdir", str(tmp_path / "unbroken")])
    expected = json.loads((Path(unbroken["run_dir"]) / "capgeo_summary.json").read_text())
    expected_alerts = [(a["kind"], a["layer"], a["step"]) for a in expected["alerts"]]
    assert alert_warnings(caplog) and len(alert_warnings(caplog)) == len(expected_alerts)
    schedule = evaluation_steps(200, 30)
    checkpoints = schedule[3::4]  # the steps last.ckpt is written at
    alert_steps = sorted({step for _, _, step in expected_alerts})
    # the setting is what this test needs: an alert after the first checkpoint and before the last one
    assert checkpoints[0] < alert_steps[0] and alert_steps[-1] < checkpoints[-1]

    # killed just before the first alert (resumes from a checkpoint before it: the alert comes after the
    # resume), then after the last alert (resumes from a checkpoint after it: every alert raised before)
    first_kill = alert_steps[0] - 1
    second_kill = next(step for step in checkpoints if step > alert_steps[-1]) + 1
    logdir = str(tmp_path / "broken")
    raised: list[list[str]] = []
    for crash_step, resume in ((first_kill, []), (second_kill, ["--resume"])):
        caplog.clear()
        with pytest.raises(RuntimeError, match=f"simulated crash at step {crash_step}"):
            train.main([*args, "--logdir", logdir, *resume], callbacks=[Crash(crash_step)])
        raised.append(alert_warnings(caplog))
    caplog.clear()
    resumed = train.main([*args, "--logdir", logdir, "--resume"])
    raised.append(alert_warnings(caplog))
    assert resumed["run_dir"] == str(Path(logdir) / "mod-easy-xs-s0" / "version_0")  # the same run folder
    assert [len(r) for r in raised] == [0, len(expected_alerts), 0]  # each alert exactly once

    summary = json.loads((Path(resumed["run_dir"]) / "capgeo_summary.json").read_text())
    for tag, points in summary["series"].items():
        # the same evaluation steps as the unbroken run, step 0 included: no gap, no duplicate (probes are
        # taken every 4th evaluation, the rest at every one)
        cadence = train.MEASURE_OPTIONS["probes"]["every_n_evals"] if tag.startswith("probe") else 1
        # the training loss is the mean since the previous evaluation: there is none before step 0's
        expected_steps = schedule[1::cadence] if tag == "train/loss" else schedule[::cadence]
        assert [step for step, _ in points] == expected_steps, tag
    # bit-identical: the task stream resumes at the checkpoint's batch, and training is deterministic (only
    # what the runs cost differs)
    cost = ("wall_seconds", "cpu_seconds", "resumes")
    assert (summary["resumes"], expected["resumes"]) == (2, 0)  # two kills, two resumes, counted across parts
    assert {k: v for k, v in summary.items() if k not in cost} == {k: v for k, v in expected.items() if k not in cost}
    assert_same_tensors(load_checkpoint(unbroken)["state_dict"], load_checkpoint(resumed)["state_dict"])

    # one event file per run (three), with each alert's text entry once across them
    files = sorted(Path(resumed["run_dir"]).glob("events.out.tfevents.*"))
    assert len(files) == 3
    assert [alert_entries(f) for f in files] == [0, len(expected_alerts), 0]


def alert_entries(event_file: Path) -> int:
    events = EventAccumulator(str(event_file), size_guidance={"tensors": 0})
    events.Reload()
    return sum(len(events.Tensors(tag)) for tag in events.Tags()["tensors"] if tag.startswith("capgeo/alerts"))


# -- hooks, captured rows and memory over a long run --------------------------------------------------------
def holds(value: Any) -> bool:
    return value is not None and (isinstance(value, torch.Tensor) or len(value) > 0)


def live_tensor_bytes() -> int:
    """Bytes of the storages of every tensor the garbage collector can reach (tracemalloc does not see them)."""
    storages: dict[int, int] = {}
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor) and obj.device.type == "cpu" and obj.layout == torch.strided:
            storage = obj.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


class AfterEvaluation(pl.Callback):
    """After each validation: no hook left on any module and no captured rows held; at evaluations ``start``
    and ``end``, the bytes of live tensors, and the Python memory allocated in between and still held."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.evaluations = 0
        self.tensor_bytes: list[int] = []
        self.python_growth = 0
        self.hooks_seen: list[str] = []
        self.rows_seen: list[str] = []

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.evaluations += 1
        step = trainer.global_step
        for name, module in pl_module.named_modules():
            for kind in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks"):
                if getattr(module, kind):
                    self.hooks_seen.append(f"{name or '<root>'}.{kind} at step {step}")
        if nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks:
            self.hooks_seen.append(f"global forward hooks at step {step}")
        for callback in trainer.callbacks:
            if isinstance(callback, (RankMeMonitor, LinearProbeMonitor)):
                capture = callback.unit.capture
                held = {key: getattr(capture, key) for key in ("_rows", "_labels", "_counts", "_handles", "_batch",
                                                               "_batch_labels")}
                self.rows_seen += [f"{type(callback).__name__}.capture.{key} at step {step}"
                                   for key, value in held.items() if holds(value)]
        if self.evaluations in (self.start, self.end):
            gc.collect()
            self.tensor_bytes.append(live_tensor_bytes())
        if self.evaluations == self.start:
            tracemalloc.start()
        elif self.evaluations == self.end:
            self.python_growth = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        tracemalloc.stop()


@pytest.mark.slow
def test_hooks_and_rows_freed_after_every_evaluation_and_memory_stays_flat(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, options in CHEAP_MEASURES.items():  # the costly measures at 6 of the 60 evaluations
        monkeypatch.setitem(train.MEASURE_OPTIONS, name, {**options, "every_n_evals": 10})
    checker = AfterEvaluation(start=10, end=60)
    summary = train.main([*TASK, "--max-steps", "60", "--eval-points", "60", "--measures", "all",
                          "--logdir", str(tmp_path)], callbacks=[checker])
    assert checker.evaluations == 60 and len(summary["series"]["rankme/norm_f"]) == 60
    assert len(summary["series"]["llc"]) == 6
    assert checker.hooks_seen == []
    assert checker.rows_seen == []
    # between evaluations 10 and 60, no tensor is kept: rows captured at an evaluation (98 x 128 float32 per
    # layer and callback: 300 kB an evaluation), batches or autograd graphs would add up to MBs
    before, after = checker.tensor_bytes
    assert after - before < 2**16, f"live tensors grew from {before} to {after} bytes"
    # Python objects allocated after evaluation 10 and still held at 60: the series (a few kB an
    # evaluation) and Lightning's bookkeeping, measured at about 1 MiB
    growth = checker.python_growth
    assert growth < 5 * 2**20, f"Python-tracked memory grew {growth / 2**20:.1f} MiB over 50 evaluations"
    print(f"\nlive tensors {before} -> {after} bytes; Python memory held since evaluation 10: {growth} bytes")


# -- bad command lines -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--max-steps", "0"], ["--max-steps must be at least 1, got 0"]),
        (["--max-steps", "-5"], ["--max-steps must be at least 1, got -5"]),
        (["--eval-points", "0"], ["--eval-points must be at least 1, got 0"]),
        (["--batch-size", "0"], ["--batch-size must be at least 1, got 0"]),
        (["--overhead-budget", "1.5"], ["--overhead-budget: overhead_budget must be a share of the run's time",
                                        "'measure' (time everything, thin nothing)",
                                        "'off' (no budget, nothing timed); got 1.5"]),
        (["--overhead-budget", "fast"], ["--overhead-budget: overhead_budget must be", "got 'fast'"]),
        (["--measures", "rankme,bogus"], ["unknown measure(s) bogus; valid: default, none, all", "llc"]),
        (["--size", "giant"], ["--size: invalid choice: 'giant'", *SIZES]),
        (["--difficulty", "extreme"], ["--difficulty: invalid choice: 'extreme'", *tasks.DIFFICULTIES]),
        (["--task", "sorting"], ["--task: invalid choice: 'sorting'", *tasks.TASKS]),
    ],
)
def test_bad_arguments_exit_with_code_2_naming_the_problem(args: list[str], expected: list[str], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    logdir = tmp_path / "never-created"
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--task", "mod", *args, "--logdir", str(logdir)])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    for text in expected:
        assert text in error
    assert not logdir.exists()  # nothing is created before the arguments are checked


def test_unwritable_logdir_fails_before_training(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("a regular file: nothing can be created under it, even by root")
    with pytest.raises(SystemExit, match=r"--logdir '.*a_file/sub' is not writable") as exit_info:
        train.main([*TASK, "--max-steps", "2", "--logdir", str(blocker / "sub")])
    assert exit_info.value.code != 0


def test_measure_callbacks_come_from_measure_options() -> None:
    callbacks = train.build_measure_callbacks(list(train.MEASURES), run_info={})
    assert [type(cb).__name__ for cb in callbacks] == [
        "RankMeMonitor", "LinearProbeMonitor", "WeightNormMonitor", "GradientRankMonitor", "HessianMonitor",
        "LLCMonitor", "CommutatorDefectMonitor", "PrecursorDetector"]
    # each callback takes its cadence from the measure's options (RankMe's is its own default, every evaluation)
    cadences = [cb.every_n_evals for cb in callbacks if isinstance(cb, MeasureCallback)]
    costly = ("grad_rank", "hessian", "llc", "commutator")
    assert cadences == [1, train.MEASURE_OPTIONS["probes"]["every_n_evals"], 1] + \
        [train.MEASURE_OPTIONS[m]["every_n_evals"] for m in costly]
    # the detector always: it records every scalar and writes the summary, with or without measures
    assert [type(cb).__name__ for cb in train.build_measure_callbacks([], run_info={})] == ["PrecursorDetector"]
