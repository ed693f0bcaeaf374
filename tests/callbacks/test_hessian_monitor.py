from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from torch import Tensor

from capgeo_callbacks.callbacks.hessian_monitor import HessianMonitor
from capgeo_callbacks.capture.batches import answer_cross_entropy
from capgeo_callbacks.measures.hessian import hessian_top_eigenvalues, hutchinson_trace
from tests.callbacks.conftest import read_events
from tests.callbacks.helpers import (
    TinyAnswerLM,
    ValuesAtValidationEnd,
    assert_identical_training,
    first_examples,
    fit,
    tuple_loss,
)


@pytest.mark.slow
def test_logged_at_evaluations_and_equal_to_the_pure_functions(tmp_path: Path) -> None:
    monitor = HessianMonitor(loss_fn=tuple_loss, k=3, every_n_evals=1, batch_size=32, trace=True,
                             trace_samples=16)
    reader = ValuesAtValidationEnd(monitor)
    model, _ = fit(tmp_path, [reader, monitor])
    tags = [f"hessian/eig_{i}" for i in range(3)] + ["hessian/trace"]
    assert monitor.tags == tags
    assert sorted(reader.seen) == [8, 16, 24] and all(set(v) == set(tags) for v in reader.seen.values())
    events = read_events(tmp_path)
    val_steps = [e.step for e in events.Scalars("val_acc")]
    for tag in tags:
        assert [e.step for e in events.Scalars(tag)] == val_steps

    model.eval()
    batch = first_examples(32)
    params = [p for p in model.parameters() if p.requires_grad]
    expected = hessian_top_eigenvalues(lambda: tuple_loss(model(batch[0]), batch), params, 3,
                                       generator=torch.Generator().manual_seed(0))
    last = reader.seen[24]
    logged = [last[f"hessian/eig_{i}"] for i in range(3)]
    assert logged == sorted(logged, reverse=True)
    assert logged == pytest.approx(expected.tolist(), rel=1e-5)
    trace = hutchinson_trace(lambda: tuple_loss(model(batch[0]), batch), params, 16,
                             generator=torch.Generator().manual_seed(1)).trace
    assert last["hessian/trace"] == pytest.approx(trace, rel=1e-5)


def test_fused_attention_model_with_dict_batches(tmp_path: Path) -> None:
    # TinyAnswerLM calls F.scaled_dot_product_attention: double backward needs the forced math path
    monitor = HessianMonitor(k=2, every_n_evals=1, batch_size=32)
    model, _ = fit(tmp_path, [monitor], steps=8, model=TinyAnswerLM())
    assert [s for s, _ in monitor.series["hessian/eig_0"]] == [8]
    assert monitor.series["hessian/eig_0"][0][1] >= monitor.series["hessian/eig_1"][0][1]
    model.eval()
    batch = monitor.fixed_batch
    params = list(model.parameters())
    closure = lambda: answer_cross_entropy(model(batch["input_ids"]), batch)
    expected = hessian_top_eigenvalues(closure, params, 2)
    assert monitor.series["hessian/eig_0"][0][1] == pytest.approx(float(expected[0]), rel=1e-5)


def test_every_n_evals(tmp_path: Path) -> None:
    monitor = HessianMonitor(loss_fn=tuple_loss, k=1, every_n_evals=2, batch_size=16, num_iterations=10)
    fit(tmp_path, [monitor], steps=32)
    assert [s for s, _ in monitor.series["hessian/eig_0"]] == [8, 24]


def test_observing_does_not_change_training(tmp_path: Path) -> None:
    monitor = HessianMonitor(loss_fn=tuple_loss, k=2, every_n_evals=1, batch_size=32, trace=True,
                             trace_samples=4)
    assert_identical_training(tmp_path, [monitor])


def test_non_finite_loss_is_skipped_with_one_warning(tmp_path: Path) -> None:
    def nan_loss(output: Tensor, batch: Sequence[Tensor]) -> Tensor:
        return tuple_loss(output, batch) * float("nan")

    monitor = HessianMonitor(loss_fn=nan_loss, every_n_evals=1, batch_size=16, num_iterations=5, tol=0.0)
    with pytest.warns(UserWarning, match=r"non-finite loss \(nan\) at step 8") as record:
        _, trainer = fit(tmp_path, [monitor], steps=16)
    assert trainer.global_step == 16 and monitor.series == {}
    assert sum("non-finite" in str(w.message) for w in record) == 1


def test_tuple_batches_without_loss_fn_raise_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="HessianMonitor: the training batch is a list of 2 items"):
        fit(tmp_path, [HessianMonitor()], steps=8)


def test_state_dict_round_trip() -> None:
    monitor = HessianMonitor(loss_fn=tuple_loss, batch_size=4)
    monitor.cache(first_examples(4))
    monitor.series = {"hessian/eig_0": [[8, 3.0]]}
    monitor.evaluations = 8
    restored = HessianMonitor(loss_fn=tuple_loss, batch_size=4)
    restored.load_state_dict(monitor.state_dict())
    assert restored.series == monitor.series and restored.evaluations == 8
    assert torch.equal(restored.fixed_batch[1], first_examples(4)[1])
    restored.load_state_dict({})
    assert restored.series == {} and restored.evaluations == 0
    assert HessianMonitor(k=3).state_key != HessianMonitor(k=5).state_key


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="k must be"):
        HessianMonitor(k=0)
    with pytest.raises(ValueError, match="num_iterations"):
        HessianMonitor(k=3, num_iterations=2)
    with pytest.raises(ValueError, match="batch_size"):
        HessianMonitor(batch_size=0)
    with pytest.raises(ValueError, match="trace_samples"):
        HessianMonitor(trace_samples=0)
    with pytest.raises(ValueError, match="every_n_evals"):
        HessianMonitor(every_n_evals=-1)
