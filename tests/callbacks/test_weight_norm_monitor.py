"""WeightNormMonitor on a real Trainer: the norms of the weights each validation saw, per layer, and no effect on
training."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Callback, Trainer

from capgeo_callbacks import PrecursorDetector, WeightNormMonitor, parameter_norm
from tests.callbacks.conftest import ForeignEncoder, read_events
from tests.callbacks.helpers import TinyAnswerLM, assert_identical_training, fit


class NormsAtValidation(Callback):
    """The norms of the weights as each validation starts, computed here independently of the monitor."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[float, float]] = {}

    def on_validation_start(self, trainer: Trainer, pl_module: ForeignEncoder) -> None:
        if not trainer.sanity_checking:
            flat = torch.cat([p.detach().double().flatten() for p in pl_module.parameters()])
            layer = torch.cat([p.detach().double().flatten() for p in pl_module.encoder.layers[1].parameters()])
            self.seen[trainer.global_step] = (float(flat.norm()), float(layer.norm()))


def test_norms_of_the_weights_each_validation_saw(tmp_path: Path) -> None:
    reference = NormsAtValidation()
    monitor = WeightNormMonitor(layers="encoder.layers.*")
    detector = PrecursorDetector(monitor="val_acc", logprob_monitor=None, overhead_budget="measure")  # every point
    model, _ = fit(tmp_path, [reference, monitor, detector])
    assert monitor.tags == ["weight_norm/global", "weight_norm/layers.0", "weight_norm/layers.1"]
    steps = [step for step, _ in monitor.series["weight_norm/global"]]
    assert steps == sorted(reference.seen) == [8, 16, 24]
    for (step, total), (_, layer) in zip(monitor.series["weight_norm/global"], monitor.series["weight_norm/layers.1"],
                                         strict=True):
        assert math.isclose(total, reference.seen[step][0], rel_tol=1e-12)
        assert math.isclose(layer, reference.seen[step][1], rel_tol=1e-12)
    assert math.isclose(monitor.series["weight_norm/global"][-1][1], parameter_norm(model.parameters()), rel_tol=1e-12)
    # the detector records them into the summary, and every logger gets them beside val_acc
    assert detector.summary["series"]["weight_norm/global"] == monitor.series["weight_norm/global"]
    events = read_events(tmp_path)
    assert [e.step for e in events.Scalars("weight_norm/layers.0")] == [e.step for e in events.Scalars("val_acc")]


def test_default_layers_are_the_blocks_found_else_global_only(tmp_path: Path) -> None:
    on_capgeo = WeightNormMonitor()
    fit(tmp_path / "capgeo", [on_capgeo], model=TinyAnswerLM())
    assert on_capgeo.tags == ["weight_norm/global", "weight_norm/blocks.0", "weight_norm/norm_f"]
    foreign = WeightNormMonitor()  # torch.nn.TransformerEncoder's layers
    fit(tmp_path / "foreign", [foreign])
    assert foreign.tags == ["weight_norm/global", "weight_norm/layers.0", "weight_norm/layers.1"]
    unnamed = WeightNormMonitor()  # no transformer blocks: the global norm alone
    fit(tmp_path / "unnamed", [unnamed], model=NoBlocks())
    assert unnamed.tags == ["weight_norm/global"] and len(unnamed.series["weight_norm/global"]) == 3


class NoBlocks(ForeignEncoder):
    """ForeignEncoder's task on a bag of embeddings: no stack of blocks anywhere."""

    def __init__(self) -> None:
        super().__init__()
        del self.encoder

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x).mean(dim=1))


def test_bad_arguments_and_unknown_layers(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="every_n_evals"):
        WeightNormMonitor(every_n_evals=0)
    with pytest.raises(ValueError, match="prefix"):
        WeightNormMonitor(prefix="a/b")
    with pytest.raises(ValueError, match="matches no module"):
        fit(tmp_path, [WeightNormMonitor(layers="decoder.*")])


def test_training_is_unchanged(tmp_path: Path) -> None:
    assert_identical_training(tmp_path, [WeightNormMonitor(layers="encoder.layers.*")])
