"""examples/grokking: the split and the control as its docstring states them, and a tiny run's record: training
accuracy beside validation accuracy, the weight norm, RankMe and the probe, the budget; a run resumed from its
checkpoint records the series an unbroken run does."""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.loggers import TensorBoardLogger

from capgeo_callbacks import read_summary
from examples.grokking.grokking import (
    GrokkingModel,
    ModularArithmetic,
    Settings,
    answer_loss,
    capgeo_callbacks,
    pairs,
    run_name,
    train,
)

TINY = {"p": 11, "dim": 16, "heads": 2, "batch_size": 32, "max_steps": 40, "fraction": 0.5, "seed": 3}


def test_split_covers_every_pair_once_and_the_control_shuffles_training_answers() -> None:
    settings = Settings(**TINY)
    (train_x, train_y), (val_x, val_y) = pairs(settings)
    assert len(train_x) == round(0.5 * 121) and len(val_x) == 121 - len(train_x)
    seen = {tuple(row.tolist()) for row in torch.cat([train_x, val_x])}
    assert len(seen) == 121  # every question once
    a, b = val_x[:, 0], val_x[:, 2]
    assert torch.equal(val_y[:, -1], (a + b) % 11) and (val_y[:, :-1] == -100).all()
    (_, control_y), (_, control_val_y) = pairs(Settings(**TINY, control=True))
    assert torch.equal(control_val_y, val_y)  # validation answers stay true
    assert sorted(control_y[:, -1].tolist()) == sorted(train_y[:, -1].tolist())
    assert not torch.equal(control_y[:, -1], train_y[:, -1])
    assert run_name(Settings(**TINY, operation="sub", weight_decay=0.3, control=True)) == "sub-f0.5-wd0.3-s3-control"


def test_bad_settings_are_named() -> None:
    with pytest.raises(ValueError, match="unknown operation 'div'; known: add, sub"):
        Settings(operation="div")
    with pytest.raises(ValueError, match="fraction must be in"):
        Settings(fraction=1.0)
    with pytest.raises(ValueError, match="unknown settings"):
        Settings.from_config({"lr": 1e-3, "learning_rate": 1e-3})


def test_the_commutator_defect_is_measured_on_its_tuple_batches_with_the_answer_loss(tmp_path: Path) -> None:
    settings = Settings(**TINY)
    model, data = GrokkingModel(settings), ModularArithmetic(settings)
    batch = next(iter(data.train_dataloader()))
    logits = model(batch[0])
    # the loss a gradient measure is given is the training loss: cross-entropy of the answer at "="
    assert torch.equal(answer_loss(logits, batch), F.cross_entropy(logits[:, -1], batch[1][:, -1]))
    assert not [cb for cb in capgeo_callbacks(settings) if "Commutator" in type(cb).__name__]  # off by default
    train({**TINY, "max_steps": 16, "commutator": True, "trial_dir": str(tmp_path), "resume_from": None})
    series = read_summary(tmp_path)["series"]["commutator/defect"]
    assert [step for step, _ in series] == [0, 8, 16]  # every 8th of the 17 evaluations, step 0 included
    assert all(value > 0 for _, value in series)


@pytest.mark.slow
def test_a_run_records_what_the_benchmark_scores_and_resumes_exactly(tmp_path: Path) -> None:
    whole = tmp_path / "whole"
    train({**TINY, "trial_dir": str(whole), "resume_from": None})
    summary = read_summary(whole)
    series = summary["series"]
    for tag in ("acc", "train/acc", "train/loss", "val/loss", "weight_norm/global", "rankme/layers.0",
                "rankme/norm", "probe_acc/model.norm"):
        assert series.get(tag), tag
    assert summary["max_steps"] == 40 and summary["steps"] == 40
    assert json.loads((whole / "run.json").read_text())["settings"]["fraction"] == 0.5
    # with stop_at, EarlyStopping ends the run at the first evaluation that reaches it
    early = tmp_path / "early"
    level = max(value for step, value in series["acc"] if step > 0)
    reached = next(step for step, value in series["acc"] if step > 0 and value >= level)
    train({**TINY, "stop_at": level - 1e-6, "trial_dir": str(early), "resume_from": None})  # above it
    assert read_summary(early)["steps"] == reached
    # stopped at step 20 and checkpointed there, then resumed by train(): the series of the unbroken run
    broken = tmp_path / "broken"
    settings = Settings(**TINY)
    pl.seed_everything(settings.seed, verbose=False)
    trainer = Trainer(max_steps=40, logger=TensorBoardLogger(broken, name="", version=""),
                      callbacks=[*capgeo_callbacks(), StopAt(20)], enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(GrokkingModel(settings), datamodule=ModularArithmetic(settings))
    assert trainer.global_step == 20
    trainer.save_checkpoint(broken / "checkpoints" / "last.ckpt")
    train({**TINY, "trial_dir": str(broken), "resume_from": str(broken / "checkpoints" / "last.ckpt")})
    resumed = read_summary(broken)["series"]
    for tag in ("acc", "train/acc", "val/loss", "weight_norm/global", "rankme/norm"):
        assert resumed[tag] == series[tag], tag


class StopAt(Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: Trainer, *args: object) -> None:
        if trainer.global_step >= self.step:
            trainer.should_stop = True
