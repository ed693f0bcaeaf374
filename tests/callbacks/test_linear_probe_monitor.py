from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from capgeo_callbacks.callbacks.linear_probe_monitor import LinearProbeMonitor
from capgeo_callbacks.measures.probes import distinct_split, linear_probe_accuracy
from tests.callbacks.conftest import loaders, read_events
from tests.callbacks.helpers import (
    TinyAnswerLM,
    ValuesAtValidationEnd,
    answer_loaders,
    assert_identical_training,
    fit,
)


def labels(batch: Any) -> Tensor:
    return batch[1]


def test_foreign_model_with_labels_fn_matches_independent_probe(tmp_path: Path) -> None:
    monitor = LinearProbeMonitor(layers="encoder.layers.*", selector="mean", labels_fn=labels, num_rows=200)
    reader = ValuesAtValidationEnd(monitor)
    model, _ = fit(tmp_path, [reader, monitor])
    assert monitor.tags == ["probe_acc/layers.0", "probe_acc/layers.1"]
    for name in monitor.layer_names:  # hooks are removed after measuring
        assert not dict(model.named_modules())[name]._forward_hooks
    events = read_events(tmp_path)
    val_steps = [e.step for e in events.Scalars("val_acc")]
    assert [e.step for e in events.Scalars("probe_acc/layers.1")] == val_steps
    assert [s for s, _ in monitor.series["probe_acc/layers.1"]] == [8, 16, 24]
    assert set(reader.seen[24]) == {"probe_acc/layers.0", "probe_acc/layers.1"}

    captured: list[Tensor] = []
    handle = model.encoder.layers[1].register_forward_hook(lambda m, a, out: captured.append(out.mean(dim=1)))
    model.eval()
    ys: list[Tensor] = []
    with torch.no_grad():
        for x, y in loaders()[1]:
            model(x)
            ys.append(y)
    handle.remove()
    x, y = torch.cat(captured)[:200], torch.cat(ys)[:200]
    expected = linear_probe_accuracy(x[:100], y[:100], x[100:], y[100:], ridge=1e-3)
    assert events.Scalars("probe_acc/layers.1")[-1].value == pytest.approx(expected, abs=1e-6)
    assert monitor.series["probe_acc/layers.1"][-1][1] == pytest.approx(expected, abs=1e-12)
    assert monitor.rows == {"probe_acc/layers.0": 200, "probe_acc/layers.1": 200}


def test_answer_positions_and_answer_token_labels_by_default(tmp_path: Path) -> None:
    monitor = LinearProbeMonitor(num_rows=256)  # default layers: **.blocks.* and **.norm_f
    model, _ = fit(tmp_path, [monitor], steps=16, model=TinyAnswerLM())
    assert monitor.layer_names == ["blocks.0", "norm_f"]
    assert [s for s, _ in monitor.series["probe_acc/norm_f"]] == [8, 16]

    rows: list[Tensor] = []
    handle = model.norm_f.register_forward_hook(lambda m, a, out: rows.append(out))
    model.eval()
    targets: list[Tensor] = []
    with torch.no_grad():
        for batch in answer_loaders()[1]:
            model(batch["input_ids"])
            rows[-1] = rows[-1][batch["answer_mask"]]
            targets.append(batch["targets"][batch["answer_mask"]])
    handle.remove()
    x, y = torch.cat(rows)[:256], torch.cat(targets)[:256]
    # the validation set repeats two of its 128 questions: the fitting half keeps both copies of each, so the
    # halves share no row (the first half would)
    fit_rows = distinct_split(x)
    assert (x[:128, None] == x[None, 128:]).all(dim=-1).any() and fit_rows.sum() >= 128
    assert not (x[fit_rows][:, None] == x[~fit_rows][None]).all(dim=-1).any()
    expected = linear_probe_accuracy(x[fit_rows], y[fit_rows], x[~fit_rows], y[~fit_rows])
    assert monitor.series["probe_acc/norm_f"][-1][1] == pytest.approx(expected, abs=1e-12)


def test_every_n_evals(tmp_path: Path) -> None:
    monitor = LinearProbeMonitor(layers="encoder.layers.1", selector="last", labels_fn=labels, num_rows=64,
                                 every_n_evals=2)
    fit(tmp_path, [monitor], steps=32)
    assert [s for s, _ in monitor.series["probe_acc/encoder.layers.1"]] == [8, 24]


def test_observing_does_not_change_training(tmp_path: Path) -> None:
    monitor = LinearProbeMonitor(layers="encoder.layers.*", selector="mean", labels_fn=labels, num_rows=128)
    assert_identical_training(tmp_path, [monitor])


def test_nan_hidden_states_are_skipped_with_a_warning(tmp_path: Path) -> None:
    def nan_rows(hidden: Tensor, batch: Any) -> Tensor:
        rows = hidden.mean(dim=1).clone()
        rows[0, 0] = float("nan")
        return rows

    monitor = LinearProbeMonitor(layers="encoder.layers.0", selector=nan_rows, labels_fn=labels, num_rows=64)
    with pytest.warns(UserWarning, match="non-finite"):
        _, trainer = fit(tmp_path, [monitor], steps=16)
    assert trainer.global_step == 16 and monitor.series == {}


def test_labels_that_do_not_match_the_rows_are_skipped_with_a_warning(tmp_path: Path) -> None:
    # selector "all" takes 64 x 6 rows from a validation batch, labels_fn gives 64 labels
    monitor = LinearProbeMonitor(layers="encoder.layers.0", selector="all", labels_fn=labels, num_rows=1000)
    with pytest.warns(UserWarning, match="64 labels for 384 rows .* labels_fn must give one label per"):
        fit(tmp_path, [monitor], steps=8)
    assert monitor.series == {}


def test_answer_labels_need_the_batch_keys(tmp_path: Path) -> None:
    monitor = LinearProbeMonitor(layers="encoder.layers.0", selector="answer")  # tuple batches carry no mask
    with pytest.warns(UserWarning, match=r"answer labels need batch\['targets'\]"):
        fit(tmp_path, [monitor], steps=8)
    assert monitor.series == {}


def test_state_dict_round_trip() -> None:
    monitor = LinearProbeMonitor(layers="a.*")
    monitor.series = {"probe_acc/x": [[8, 0.5], [16, 0.75]]}
    monitor.evaluations = 2
    monitor.rows = {"probe_acc/x": 100}
    restored = LinearProbeMonitor(layers="a.*")
    restored.load_state_dict(monitor.state_dict())
    assert restored.series == monitor.series and restored.evaluations == 2
    assert restored.rows == {"probe_acc/x": 100}
    restored.load_state_dict({})
    assert restored.series == {} and restored.rows == {}
    assert LinearProbeMonitor(layers="a.*").state_key != LinearProbeMonitor(layers="b.*").state_key


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="selector 'mean' needs labels_fn"):
        LinearProbeMonitor(selector="mean")
    with pytest.raises(ValueError, match="num_rows"):
        LinearProbeMonitor(num_rows=3)
    with pytest.raises(ValueError, match="ridge"):
        LinearProbeMonitor(ridge=-1.0)
    with pytest.raises(ValueError, match="valid: target, answer, first_answer, question_mean, last, mean, all"):
        LinearProbeMonitor(selector="first", labels_fn=labels)
    with pytest.raises(ValueError, match="labels_fn must be callable"):
        LinearProbeMonitor(labels_fn="targets")  # type: ignore[arg-type]
