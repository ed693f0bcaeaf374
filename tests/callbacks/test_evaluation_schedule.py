"""EvaluationSchedule on a real Trainer: step 0 reaches every measure, resumed runs evaluate at the same steps."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.pytorch import Trainer, seed_everything

from capgeo_callbacks import (
    EvaluationSchedule,
    GradientRankMonitor,
    LinearProbeMonitor,
    PrecursorDetector,
    RankMeMonitor,
)
from capgeo_callbacks.run.schedule import evaluation_steps
from tests.callbacks.helpers import TinyAnswerLM, answer_loaders

LAYERS = ["blocks.*", "norm_f"]


def callbacks(schedule: EvaluationSchedule) -> list:
    return [RankMeMonitor(layers=LAYERS, num_rows=64), LinearProbeMonitor(layers=LAYERS, num_rows=64),
            GradientRankMonitor(batch_size=16),
            PrecursorDetector(monitor="val_acc", logprob_monitor=None, overhead_budget=None), schedule]


def trainer(path: Path, cbs: list, max_steps: int) -> Trainer:
    return Trainer(max_steps=max_steps, val_check_interval=1, check_val_every_n_epoch=None, num_sanity_val_steps=0,
                   accelerator="cpu", logger=False, callbacks=cbs, enable_progress_bar=False,
                   enable_model_summary=False, enable_checkpointing=False, default_root_dir=path, deterministic=True)


def test_step_zero_reaches_every_measure(tmp_path: Path) -> None:
    seed_everything(0, verbose=False)
    cbs = callbacks(EvaluationSchedule(points=12))
    trainer(tmp_path, cbs, 40).fit(TinyAnswerLM(), *answer_loaders())
    expected = evaluation_steps(40, 12)
    assert expected[0] == 0
    for callback in cbs[:3]:
        for tag, points in callback.series.items():
            assert [p[0] for p in points] == expected, tag  # step 0 and every scheduled step, once
    assert [p[0] for p in cbs[3].acc] == expected


@pytest.mark.slow
def test_a_resumed_run_evaluates_at_the_same_steps(tmp_path: Path) -> None:
    seed_everything(0, verbose=False)
    unbroken = callbacks(EvaluationSchedule(max_steps=40, points=12))
    trainer(tmp_path / "a", unbroken, 40).fit(TinyAnswerLM(), *answer_loaders())

    seed_everything(0, verbose=False)
    first = callbacks(EvaluationSchedule(max_steps=40, points=12))  # the whole budget's schedule, stopped at 17
    stopped = trainer(tmp_path / "b", first, 17)
    stopped.fit(TinyAnswerLM(), *answer_loaders())
    stopped.save_checkpoint(tmp_path / "stopped.ckpt")
    second = callbacks(EvaluationSchedule(max_steps=40, points=12))
    trainer(tmp_path / "c", second, 40).fit(TinyAnswerLM(), *answer_loaders(), ckpt_path=tmp_path / "stopped.ckpt")
    for before, after in zip(unbroken[:3], second[:3], strict=True):
        assert after.series.keys() == before.series.keys()
        for tag, points in before.series.items():
            assert [p[0] for p in after.series[tag]] == [p[0] for p in points], tag
            # identical up to the stop (a plain DataLoader restarts its epoch on resume, so not after it;
            # train.py's resumable task stream is bit-identical throughout: tests/test_reliability.py)
            head = [p[1] for p in points if p[0] <= 17]
            assert [p[1] for p in after.series[tag]][: len(head)] == pytest.approx(head, rel=1e-9), tag


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="valid: geometric, linear"):
        EvaluationSchedule(schedule="log")
    with pytest.raises(ValueError, match="steps must be non-negative integers"):
        EvaluationSchedule(steps=[0, -4])
    with pytest.raises(ValueError, match="points must be an integer >= 1"):
        EvaluationSchedule(points=0)


def test_the_budget_under_max_epochs(tmp_path: Path) -> None:
    """Under max_epochs (no max_steps) the schedule spans the trainer's estimated optimizer steps."""
    seed_everything(0, verbose=False)
    train, val = answer_loaders()
    schedule = EvaluationSchedule(points=12)
    cbs = [RankMeMonitor(layers=LAYERS, num_rows=64), PrecursorDetector(monitor="val_acc", logprob_monitor=None),
           schedule]
    fitted = Trainer(max_epochs=2, num_sanity_val_steps=0, accelerator="cpu", logger=False, callbacks=cbs,
                     enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                     default_root_dir=tmp_path)
    fitted.fit(TinyAnswerLM(), train, val)
    budget = 2 * len(train)
    assert fitted.global_step == budget
    assert schedule.steps == evaluation_steps(budget, 12)
    assert [p[0] for p in cbs[1].acc] == schedule.steps  # validated at the schedule's steps only, not at epoch ends
