"""Bad input to the callbacks (spec §11): a clear error, or a warning and a skipped value while training
goes on; never a crash mid-run or a silently wrong number.

Covered in the per-callback files and not repeated here: a selector that yields NaN rows (RankMe, probes),
the ``"answer"`` selector or answer labels on batches without ``answer_mask`` (RankMe, probes), the default
loss on tuple batches (gradient monitors: a clear error at the first batch), labels that do not match the
rows, a failing loss function, diverging SGLD chains. train.py's command line: tests/test_reliability.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from capgeo_callbacks import (
    CommutatorDefectMonitor,
    GradientRankMonitor,
    HessianMonitor,
    LinearProbeMonitor,
    LLCMonitor,
    PrecursorDetector,
    RankMeMonitor,
)
from tests.callbacks.conftest import ForeignEncoder, loaders, reference_rankme, sum_mod_data
from tests.callbacks.helpers import fit, make_trainer, tuple_labels, tuple_loss


class DictOutput(nn.Module):
    def forward(self, x: Tensor) -> dict[str, Tensor]:
        return {"hidden": x}


class NoOutput(nn.Module):
    """A module called for a side effect (here: none), returning nothing."""

    def forward(self, x: Tensor) -> None:
        return None


class NonFinite(nn.Module):
    """Identity in training mode; adds ``value`` (NaN or Inf) in eval mode, i.e. at validation and in the
    gradient-based measures, which run in eval mode: training itself stays finite."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def forward(self, x: Tensor) -> Tensor:
        return x if self.training else x + self.value


class OddEncoder(ForeignEncoder):
    """ForeignEncoder with modules the callbacks may be pointed at: ``tap`` returns a dict, ``sink`` returns
    ``None``, and ``poison`` (after the encoder) makes the hidden states non-finite in eval mode."""

    def __init__(self, poison: float = 0.0) -> None:
        super().__init__()
        self.tap, self.sink, self.poison = DictOutput(), NoOutput(), NonFinite(poison)

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.tap(self.embed(x))["hidden"]
        self.sink(hidden)
        return self.head(self.poison(self.encoder(hidden)).mean(dim=1))


def messages(record: Any) -> list[str]:
    return [str(w.message) for w in record]


def count(record: Any, text: str) -> int:
    return sum(text in message for message in messages(record))


@pytest.mark.parametrize("monitor_class", [RankMeMonitor, LinearProbeMonitor])
def test_a_pattern_that_matches_nothing_is_an_error_listing_close_names(tmp_path: Path, monitor_class: type) -> None:
    monitor = monitor_class(layers=["encoder.layers.*", "encoder.layer.1"], selector="mean", labels_fn=tuple_labels) \
        if monitor_class is LinearProbeMonitor else monitor_class(layers=["encoder.layers.*", "encoder.layer.1"])
    model = ForeignEncoder()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=r"'encoder\.layer\.1' matches no module; closest: encoder\.layers\.1"):
        fit(tmp_path, [monitor], steps=8, model=model)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))  # before training


def test_layers_without_a_tensor_output_are_skipped_with_a_warning(tmp_path: Path) -> None:
    layers = ["tap", "sink", "encoder.layers.1"]
    rankme = RankMeMonitor(layers=layers, selector="mean", num_rows=128)
    probes = LinearProbeMonitor(layers=layers, selector="mean", labels_fn=tuple_labels, num_rows=128)
    detector = PrecursorDetector(monitor="val_acc", logprob_monitor=None, overhead_budget=None)
    with pytest.warns(UserWarning) as record:
        _, trainer = fit(tmp_path, [rankme, probes, detector], steps=16, model=OddEncoder())
    assert trainer.global_step == 16
    for name in ("RankMeMonitor", "LinearProbeMonitor"):
        assert count(record, f"{name}: layer 'tap' returned dict, not a tensor; it is skipped") == 1
        assert count(record, f"{name}: layer 'sink' returned NoneType, not a tensor; it is skipped") == 1
    # the layer with a tensor output is measured at every evaluation, the others never
    assert set(rankme.series) == {"rankme/encoder.layers.1", "ildr/encoder.layers.1"}
    assert [s for s, _ in rankme.series["rankme/encoder.layers.1"]] == [8, 16]
    assert set(probes.series) == {"probe_acc/encoder.layers.1"}
    assert set(detector.summary["layers"]) == {"encoder.layers.1"}


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_non_finite_hidden_states_and_gradients_warn_skip_and_training_goes_on(tmp_path: Path, value: float) -> None:
    small = {"loss_fn": tuple_loss, "every_n_evals": 1, "batch_size": 16}
    callbacks = [
        RankMeMonitor(layers=["encoder.layers.1", "poison"], selector="mean", num_rows=128),
        LinearProbeMonitor(layers=["encoder.layers.1", "poison"], selector="mean", labels_fn=tuple_labels,
                           num_rows=128),
        GradientRankMonitor(**small),
        HessianMonitor(**small, k=1, num_iterations=4),
        LLCMonitor(**small, num_chains=2, num_draws=5, num_batches=1),
        CommutatorDefectMonitor(**small),
        PrecursorDetector(monitor="val_acc", logprob_monitor=None, overhead_budget=None),
    ]
    with pytest.warns(UserWarning) as record:
        model, trainer = fit(tmp_path, callbacks, steps=16, model=OddEncoder(poison=value))
    assert trainer.global_step == 16
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())  # training itself was unaffected
    warned = messages(record)
    expected = [
        "RankMeMonitor: 'poison' at step 8: Z contains NaN/Inf; skip this measurement; skipped",
        "RankMeMonitor: 'poison' at step 8: ILDR is undefined on these rows (non-finite rows,",
        "LinearProbeMonitor: 'poison' at step 8: train_x contains non-finite values; skipped",
        "GradientRankMonitor: non-finite per-example gradients at step 8; skipped",
        "HessianMonitor: non-finite loss",
        "CommutatorDefectMonitor: non-finite gradients at step 8; skipped",
    ]
    for text in expected:
        assert count(record, text) == 1, (text, warned)  # once, though it happens at every evaluation
    rankme, probes, grad_rank, hessian, llc, commutator, detector = callbacks
    assert set(rankme.series) == {"rankme/encoder.layers.1", "ildr/encoder.layers.1"}
    assert len(rankme.series["rankme/encoder.layers.1"]) == len(rankme.series["ildr/encoder.layers.1"]) == 2
    assert set(probes.series) == {"probe_acc/encoder.layers.1"}
    assert grad_rank.series == {} and hessian.series == {} and commutator.series == {}
    # LLC samples a copy in train mode (devinterp's convention), where this model stays finite
    assert [s for s, _ in llc.series["llc"]] == [8, 16]
    summary = json.loads((tmp_path / "capgeo_summary.json").read_text())
    for tag, points in summary["series"].items():  # only finite values reach the summary
        assert all(math.isfinite(v) for _, v in points), tag
    assert set(summary["layers"]) == {"encoder.layers.1"}


def small_val(n: int) -> DataLoader:
    x, y = sum_mod_data(n, 1).tensors
    return DataLoader(TensorDataset(x, y), batch_size=64)


@pytest.mark.slow
def test_fewer_rows_than_asked_warn_once_and_measure_on_those(tmp_path: Path) -> None:
    rankme = RankMeMonitor(layers="encoder.layers.1", selector="mean", num_rows=1000)
    probes = LinearProbeMonitor(layers="encoder.layers.1", selector="mean", labels_fn=tuple_labels, num_rows=1000)
    grad_rank = GradientRankMonitor(loss_fn=tuple_loss, batch_size=300)  # 8 batches of 32 before evaluation 1
    detector = PrecursorDetector(monitor="val_acc", logprob_monitor=None, overhead_budget=None)
    torch.manual_seed(0)
    model = ForeignEncoder()
    trainer = make_trainer(tmp_path, [rankme, probes, grad_rank, detector], steps=16)
    with pytest.warns(UserWarning) as record:
        trainer.fit(model, loaders()[0], small_val(200))
    for name in ("RankMeMonitor", "LinearProbeMonitor"):
        assert count(record, f"{name}: 'encoder.layers.1' gave 200 rows, fewer than num_rows=1000; measured on "
                             "200 rows") == 1
    assert count(record, "GradientRankMonitor: only 256 training examples were seen before the first "
                         "measurement, fewer than 300; measuring on those") == 1
    assert [s for s, _ in rankme.series["rankme/encoder.layers.1"]] == [8, 16]
    assert rankme.rows == {"rankme/encoder.layers.1": 200, "ildr/encoder.layers.1": 200}
    assert probes.rows == {"probe_acc/encoder.layers.1": 200}
    assert detector.summary["rows"]["rankme/encoder.layers.1"] == 200  # RankMe's N is on record
    assert len(grad_rank.series["grad_erank"]) == 2
    rows: list[Tensor] = []
    handle = model.encoder.layers[1].register_forward_hook(lambda m, a, out: rows.append(out.mean(dim=1)))
    model.eval()
    with torch.no_grad():
        model(sum_mod_data(200, 1).tensors[0])
    handle.remove()
    assert rankme.series["rankme/encoder.layers.1"][-1][1] == pytest.approx(reference_rankme(rows[0].numpy()),
                                                                            rel=1e-5)


@pytest.mark.parametrize(("examples", "rankme_text", "probe_text"), [
    (1, "RankMeMonitor: 1 row captured for 'encoder.layers.1', fewer than 2; skipped",
     "LinearProbeMonitor: 1 row captured for 'encoder.layers.1', fewer than 4; skipped"),
    (3, None, "LinearProbeMonitor: 3 rows captured for 'encoder.layers.1', fewer than 4; skipped"),
])
def test_too_few_rows_to_measure_are_skipped_with_a_warning(tmp_path: Path, examples: int,
                                                             rankme_text: str | None, probe_text: str) -> None:
    rankme = RankMeMonitor(layers="encoder.layers.1", selector="mean", num_rows=64)
    probes = LinearProbeMonitor(layers="encoder.layers.1", selector="mean", labels_fn=tuple_labels, num_rows=64)
    torch.manual_seed(0)
    trainer = make_trainer(tmp_path, [rankme, probes], steps=16)
    with pytest.warns(UserWarning) as record:
        trainer.fit(ForeignEncoder(), loaders()[0], small_val(examples))
    assert trainer.global_step == 16
    assert count(record, probe_text) == 1 and probes.series == {}
    if rankme_text is None:
        assert len(rankme.series["rankme/encoder.layers.1"]) == 2  # RankMe of 3 rows is defined
    else:
        assert count(record, rankme_text) == 1 and rankme.series == {}


def test_a_monitored_metric_that_is_never_logged_warns_and_the_run_ends_normally(tmp_path: Path) -> None:
    detector = PrecursorDetector(monitor="val/acc", logprob_monitor=None)  # ForeignEncoder logs val_acc
    rankme = RankMeMonitor(layers="encoder.layers.1", selector="mean", num_rows=64)
    with pytest.warns(UserWarning, match=r"monitored metric 'val/acc' was not logged; available: .*val_acc"):
        _, trainer = fit(tmp_path, [rankme, detector], steps=16)
    assert trainer.global_step == 16
    summary = json.loads((tmp_path / "capgeo_summary.json").read_text())
    assert summary["verdict"] == "not-acquired" and summary["acquisition_step"] is None


def nan_loss(output: Tensor, batch: Sequence[Tensor]) -> Tensor:
    return tuple_loss(output, batch) * math.nan


def inf_loss(output: Tensor, batch: Sequence[Tensor]) -> Tensor:
    return tuple_loss(output, batch) * math.inf


@pytest.mark.parametrize("loss_fn", [nan_loss, inf_loss])
def test_llc_with_a_non_finite_loss_warns_and_skips(tmp_path: Path, loss_fn: Any) -> None:
    monitor = LLCMonitor(loss_fn=loss_fn, every_n_evals=1, num_chains=2, num_draws=5, batch_size=16, num_batches=1)
    with pytest.warns(UserWarning, match="2 of 2 SGLD chains diverged at step 8"):
        _, trainer = fit(tmp_path, [monitor], steps=16)
    assert trainer.global_step == 16 and "llc" not in monitor.series


class FailsMidValidation(ForeignEncoder):
    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        super().validation_step(batch, batch_idx)
        if self.global_step == 16 and batch_idx == 1:
            raise RuntimeError("validation failed")


def test_an_exception_mid_validation_leaves_no_hook_and_no_rows(tmp_path: Path) -> None:
    rankme = RankMeMonitor(layers="encoder.layers.*", selector="mean", num_rows=256)
    probes = LinearProbeMonitor(layers="encoder.layers.*", selector="mean", labels_fn=tuple_labels, num_rows=256)
    model = FailsMidValidation()
    with pytest.raises(RuntimeError, match="validation failed"):
        fit(tmp_path, [rankme, probes], steps=24, model=model)
    assert all(not module._forward_hooks for module in model.modules())
    for monitor in (rankme, probes):
        # the hooks are gone and the rows captured before the failure are freed
        assert not monitor.unit.is_attached and monitor.unit.capture.take() == {}
    assert [s for s, _ in rankme.series["rankme/layers.1"]] == [8]  # what was measured before is kept
