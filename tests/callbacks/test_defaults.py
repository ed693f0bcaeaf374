"""The callbacks at their defaults on a user's model: a Hugging Face Llama held by a LightningModule attribute,
Hugging Face batches (``input_ids`` + unshifted ``labels``), trained under ``max_epochs``. RankMe per block, probe
values, the default rules and a summary, with nothing to configure and no warning from capgeo."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch import Trainer, seed_everything
from torch import Tensor
from torch.utils.data import DataLoader

from capgeo_callbacks import EvaluationSchedule, LinearProbeMonitor, PrecursorDetector, RankMeMonitor
from capgeo_callbacks.run.schedule import evaluation_steps

transformers = pytest.importorskip("transformers")
CAPGEO = ("RankMeMonitor", "LinearProbeMonitor", "PrecursorDetector", "EvaluationSchedule", "capgeo")


class LlamaModule(pl.LightningModule):
    """A user's module: ``self.model`` is a Hugging Face causal LM built from a tiny config."""

    def __init__(self) -> None:
        super().__init__()
        config = transformers.LlamaConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16)
        self.model = transformers.LlamaForCausalLM(config)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self.model(**batch).loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        out = self.model(**batch)
        predicted, target = out.logits[:, :-1].argmax(-1), batch["labels"][:, 1:]
        self.log("val/acc", (predicted == target).all(dim=1).float().mean())
        self.log("val/loss", out.loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def batches(n: int, seed: int) -> list[dict[str, Tensor]]:
    """Sequences ``a b a b ...`` (a pattern to learn), as Hugging Face takes them: labels = input_ids."""
    pairs = torch.randint(0, 16, (n, 2), generator=torch.Generator().manual_seed(seed))
    ids = pairs.repeat(1, 4)
    return [{"input_ids": row, "labels": row.clone()} for row in ids]


def test_the_defaults_on_a_hugging_face_llama_under_max_epochs(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    seed_everything(0, verbose=False)
    train = DataLoader(batches(64, 0), batch_size=16, shuffle=True)
    val = DataLoader(batches(48, 1), batch_size=16)
    # every point (timed, nothing thinned): 12 steps of a tiny model cannot hold the default 3% budget, which would
    # thin RankMe and say so (tests/callbacks/test_overhead_budget.py); the other defaults are what this test reads
    rankme, probes, detector = RankMeMonitor(), LinearProbeMonitor(), PrecursorDetector(overhead_budget="measure")
    schedule = EvaluationSchedule(points=8)
    trainer = Trainer(max_epochs=3, callbacks=[schedule, rankme, probes, detector], default_root_dir=tmp_path,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      accelerator="cpu", log_every_n_steps=1)
    # Lightning's info lines at INFO for this test, whatever another test left its level at (restored after)
    caplog.set_level(logging.INFO, logger="lightning.pytorch.utilities.rank_zero")
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")
        trainer.fit(LlamaModule(), train, val)
    ours = [str(w.message) for w in caught if str(w.message).startswith(CAPGEO)]
    assert not ours, ours  # an ordinary run: nothing to warn about

    # the blocks and the final norm, found one level down the module's attribute, and said once
    assert rankme.layer_names == ["model.model.layers.0", "model.model.layers.1", "model.model.norm"]
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("RankMeMonitor watches")]
    assert len(said) == 1 and "model.model.layers.0 to model.model.layers.1 (2 blocks)" in said[0]
    assert rankme.selector == "target"  # the batches hold labels
    assert any(r.getMessage().startswith("RankMeMonitor reads the rows 'target'") for r in caplog.records)

    # under max_epochs: the schedule spans the estimated steps, and every measured step has RankMe of every block
    assert trainer.global_step == 12 and schedule.steps == evaluation_steps(12, 8)
    assert list(rankme.series) == [f"{prefix}/{layer}" for prefix in ("rankme", "ildr")  # ILDR: the labels' classes
                                   for layer in ("layers.0", "layers.1", "norm")]
    for points in rankme.series.values():
        assert [p[0] for p in points] == schedule.steps
    assert rankme.rows == dict.fromkeys(rankme.series, 48)  # one row per sequence: all validation gives
    assert sorted(probes.series) == ["probe_acc/layers.0", "probe_acc/layers.1", "probe_acc/norm"]
    assert all(0.0 <= p[1] <= 1.0 for points in probes.series.values() for p in points)

    summary = json.loads((Path(trainer.log_dir) / "capgeo_summary.json").read_text())
    assert list(summary["rules"]) == ["rankme-recovery", "probe-crossing", "acc-trend"]  # default_rules()
    assert "rules_left_out" not in summary
    assert summary["selectors"]["rankme"] == "target"
