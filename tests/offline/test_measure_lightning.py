"""Lightning checkpoints measured offline inside ``Trainer.validate``, their rows captured as the live monitors
capture them: the same values as the live run at the same steps, from weights-only checkpoints that record
nothing but their class."""

from __future__ import annotations

import shutil

import pytest
import torch
from lightning.pytorch import Trainer

from capgeo_callbacks.capture.layers import DEFAULT_LAYERS
from capgeo_callbacks.offline import analyze, find_revisions
from tests.offline.conftest import DIFFICULTY, DM_KWARGS, FACTORY, NUM_ROWS, REL, TASK, TrainedRun, rel_diff


def test_weights_only_checkpoints_give_the_live_series(trained_run: TrainedRun, tmp_path) -> None:
    # the numbered checkpoints alone: no callback states, no run folder summary
    for path in trained_run.checkpoints.glob("step=*.ckpt"):
        shutil.copy(path, tmp_path / path.name)
    checkpoint = torch.load(next(tmp_path.glob("*.ckpt")), weights_only=True)
    assert "callbacks" not in checkpoint and checkpoint["capgeo"]["module_class"]  # the class is recorded
    with pytest.raises(ValueError, match="--datamodule-factory"):  # no run folder: nothing records the factory
        analyze(tmp_path, task=TASK, difficulty=DIFFICULTY, datamodule_kwargs=DM_KWARGS, num_rows=NUM_ROWS)
    summary = analyze(tmp_path, task=TASK, difficulty=DIFFICULTY, datamodule_factory=FACTORY,
                      datamodule_kwargs=DM_KWARGS, num_rows=NUM_ROWS, probes=True)

    assert [r["step"] for r in summary["revisions"]] == list(range(4, 37, 4))  # by global_step, not by name
    assert summary["analysis"]["layers"] == ["blocks.0", "blocks.1", "norm_f"]
    assert summary["analysis"]["watched"] == list(DEFAULT_LAYERS)  # nothing recorded: capgeo's default layers
    assert summary["analysis"]["recorded"] == {"summary": None, "monitor": None, "session": False,
                                               "settings": "default"}
    assert summary["analysis"]["selector"] == "answer" and summary["duplicate_weights"] == []
    assert summary["task"] == TASK and summary["difficulty"] == DIFFICULTY and summary["size"] == "xs"
    worst = 0.0
    for tag, live_points in trained_run.rankme.series.items():
        offline = summary["series"][tag]
        assert [p[0] for p in offline] == [p[0] for p in live_points]
        for (_, value), (_, live) in zip(offline, live_points, strict=True):
            assert value == pytest.approx(live, rel=REL), tag
            worst = max(worst, rel_diff(value, live))
    print(f"Lightning offline vs live RankMe: worst relative difference {worst:.1e}")
    for tag, live_points in trained_run.probes.series.items():  # measured offline at every revision (probes=True)
        offline = dict(map(tuple, summary["series"][tag]))
        assert [[step, offline[step]] for step, _ in live_points] == live_points, tag  # a count: exactly equal
    live_acc = trained_run.detector.acc
    assert [p[0] for p in summary["series"]["acc"]] == [p[0] for p in live_acc]
    for (_, value), (_, live) in zip(summary["series"]["acc"], live_acc, strict=True):
        assert value == pytest.approx(live, abs=1e-9)
    assert summary["rows"] == {**trained_run.rankme.rows, **trained_run.probes.rows}


def test_checkpoint_without_a_recorded_class_asks_for_one(tmp_path) -> None:
    models = pytest.importorskip("models")
    module = models.CapabilityModule(size="xs", vocab_size=20, max_seq_len=8)
    trainer = Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False)
    trainer.strategy.connect(module)
    trainer.save_checkpoint(tmp_path / "a.ckpt", weights_only=False)
    checkpoint = torch.load(tmp_path / "a.ckpt", weights_only=True)
    assert checkpoint["capgeo"]["module_class"] == "models.lightning_module.CapabilityModule"
    del checkpoint["capgeo"]
    torch.save(checkpoint, tmp_path / "a.ckpt")
    assert [r.step for r in find_revisions(tmp_path)] == [0]
    with pytest.raises(ValueError, match="--module-class"):
        analyze(tmp_path, task="add", difficulty="easy", datamodule_factory=FACTORY)
    with pytest.raises(ValueError, match="not a lightning.pytorch.LightningModule subclass"):
        analyze(tmp_path, task="add", difficulty="easy", datamodule_factory=FACTORY,
                module_class="capgeo_callbacks.offline.analyze")


def test_same_step_with_different_weights_is_two_runs(trained_run: TrainedRun, tmp_path) -> None:
    checkpoint = torch.load(trained_run.checkpoints / "step=4.ckpt", weights_only=True)
    (tmp_path / "a").mkdir()
    torch.save(checkpoint, tmp_path / "a" / "step=4.ckpt")
    checkpoint["state_dict"] = {k: v + 1 for k, v in checkpoint["state_dict"].items()}
    torch.save(checkpoint, tmp_path / "a" / "copy-step=4.ckpt")
    with pytest.raises(ValueError, match="two runs in one folder"):
        analyze(tmp_path / "a", task=TASK, difficulty=DIFFICULTY, datamodule_factory=FACTORY,
                datamodule_kwargs=DM_KWARGS, num_rows=NUM_ROWS)
