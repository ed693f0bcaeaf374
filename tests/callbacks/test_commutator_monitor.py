from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from torch import Tensor

from capgeo_callbacks.callbacks.commutator_monitor import CommutatorDefectMonitor
from capgeo_callbacks.capture.batches import answer_cross_entropy, default_forward, slice_batch
from capgeo_callbacks.keys import COMMUTATOR_DEFECT
from capgeo_callbacks.measures.commutator import commutator_defect
from capgeo_callbacks.registry import get_measure
from capgeo_callbacks.run.schedule import evaluation_steps
from tests.callbacks.conftest import read_events
from tests.callbacks.helpers import (
    TinyAnswerLM,
    ValuesAtValidationEnd,
    assert_identical_training,
    first_examples,
    fit,
    tuple_loss,
)


def test_logged_at_evaluations_and_equal_to_the_pure_function(tmp_path: Path) -> None:
    monitor = CommutatorDefectMonitor(loss_fn=tuple_loss, batch_size=32, num_pairs=2, every_n_evals=1)
    reader = ValuesAtValidationEnd(monitor)
    model, _ = fit(tmp_path, [reader, monitor])
    assert monitor.tags == [COMMUTATOR_DEFECT] == ["commutator/defect"]
    assert sorted(reader.seen) == [8, 16, 24] and all(set(v) == {COMMUTATOR_DEFECT} for v in reader.seen.values())
    events = read_events(tmp_path)
    assert [e.step for e in events.Scalars(COMMUTATOR_DEFECT)] == [e.step for e in events.Scalars("val_acc")]

    # the mean over pairs (examples 0-7, 8-15) and (16-23, 24-31) of the fixed batch, the first 32 examples
    model.eval()
    x, y = first_examples(32)
    parts = [(x[i:i + 8], y[i:i + 8]) for i in range(0, 32, 8)]
    expected = statistics.fmean(commutator_defect(model, tuple_loss, parts[k], parts[k + 1]) for k in (0, 2))
    assert reader.seen[24][COMMUTATOR_DEFECT] == pytest.approx(expected, rel=1e-5)
    assert events.Scalars(COMMUTATOR_DEFECT)[-1].value == pytest.approx(expected, rel=1e-5)


def test_the_finite_form_with_a_step_size(tmp_path: Path) -> None:
    # TinyAnswerLM is smooth (GELU): at a small step the finite form is near its limit (a ReLU network's need not
    # be, where a step crosses a kink)
    monitor = CommutatorDefectMonitor(batch_size=32, every_n_evals=1, step_size=1e-3)
    model, _ = fit(tmp_path, [monitor], steps=8, model=TinyAnswerLM())
    model.eval()
    a, b = slice_batch(monitor.fixed_batch, 0, 16), slice_batch(monitor.fixed_batch, 16, 32)
    finite = commutator_defect(model, answer_cross_entropy, a, b, forward=default_forward, step_size=1e-3)
    assert monitor.series[COMMUTATOR_DEFECT] == [[8, pytest.approx(finite, rel=1e-6)]]
    small_step = commutator_defect(model, answer_cross_entropy, a, b, forward=default_forward)
    assert finite == pytest.approx(small_step, rel=1e-2)


def test_dict_batches_use_the_answer_masked_loss_by_default(tmp_path: Path) -> None:
    monitor = CommutatorDefectMonitor(batch_size=32, every_n_evals=1)
    model, _ = fit(tmp_path, [monitor], steps=8, model=TinyAnswerLM())
    model.eval()
    batch = monitor.fixed_batch
    expected = commutator_defect(model, answer_cross_entropy, slice_batch(batch, 0, 16), slice_batch(batch, 16, 32),
                                 forward=default_forward)
    assert monitor.series[COMMUTATOR_DEFECT] == [[8, pytest.approx(expected, rel=1e-5)]]


def test_every_n_evals(tmp_path: Path) -> None:
    monitor = CommutatorDefectMonitor(loss_fn=tuple_loss, batch_size=16, every_n_evals=2)
    fit(tmp_path, [monitor], steps=32)
    assert [s for s, _ in monitor.series[COMMUTATOR_DEFECT]] == [8, 24]


@pytest.mark.parametrize("step_size", [None, 1e-3])
def test_observing_does_not_change_training(tmp_path: Path, step_size: float | None) -> None:
    monitor = CommutatorDefectMonitor(loss_fn=tuple_loss, batch_size=32, num_pairs=2, every_n_evals=1,
                                      step_size=step_size)
    assert_identical_training(tmp_path, [monitor])
    assert len(monitor.series[COMMUTATOR_DEFECT]) == 2


def test_a_gradient_at_the_floor_is_skipped_with_one_warning_and_no_nan(tmp_path: Path) -> None:
    monitor = CommutatorDefectMonitor(loss_fn=tuple_loss, batch_size=16, every_n_evals=1, min_grad_norm=1e6)
    with pytest.warns(UserWarning, match=r"at step 8 a batch's gradient norm is .* at or below min_grad_norm=1e\+06")\
            as record:
        _, trainer = fit(tmp_path, [monitor], steps=16)
    assert trainer.global_step == 16 and monitor.series == {}
    assert sum("min_grad_norm" in str(w.message) for w in record) == 1

    def zero_loss(output: Tensor, batch: Sequence[Tensor]) -> Tensor:
        return tuple_loss(output, batch) * 0.0  # a memorised set at its limit: both gradients 0

    monitor = CommutatorDefectMonitor(loss_fn=zero_loss, batch_size=16, every_n_evals=1, min_grad_norm=0.0)
    with pytest.warns(UserWarning, match=r"gradient norm is 0, at or below min_grad_norm=0"):
        fit(tmp_path / "zero", [monitor], steps=16)
    assert monitor.series == {}


def test_tuple_batches_without_loss_fn_raise_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="CommutatorDefectMonitor: the training batch is a list of 2 items"):
        fit(tmp_path, [CommutatorDefectMonitor()], steps=8)


def test_state_dict_round_trip() -> None:
    monitor = CommutatorDefectMonitor(loss_fn=tuple_loss, batch_size=4)
    monitor.cache(first_examples(4))
    monitor.series = {COMMUTATOR_DEFECT: [[8, 3.0]]}
    monitor.evaluations = 8
    restored = CommutatorDefectMonitor(loss_fn=tuple_loss, batch_size=4)
    restored.load_state_dict(monitor.state_dict())
    assert restored.series == monitor.series and restored.evaluations == 8
    assert torch.equal(restored.fixed_batch[1], first_examples(4)[1])
    restored.load_state_dict({})
    assert restored.series == {} and restored.evaluations == 0
    assert CommutatorDefectMonitor(num_pairs=1).state_key != CommutatorDefectMonitor(num_pairs=2).state_key
    assert CommutatorDefectMonitor().state_key != CommutatorDefectMonitor(step_size=1e-3).state_key


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="num_pairs must be an integer >= 1"):
        CommutatorDefectMonitor(num_pairs=0)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 4"):
        CommutatorDefectMonitor(batch_size=3, num_pairs=2)
    with pytest.raises(ValueError, match="step_size must be a positive finite number"):
        CommutatorDefectMonitor(step_size=-1e-3)
    with pytest.raises(ValueError, match="min_grad_norm must be a finite number >= 0"):
        CommutatorDefectMonitor(min_grad_norm=-1.0)
    with pytest.raises(ValueError, match="every_n_evals"):
        CommutatorDefectMonitor(every_n_evals=0)


@pytest.mark.parametrize(("schedule", "budget"), [
    *(("geometric", budget) for budget in (225, 350, 450, 600, 900, 2400, 5000, 20000)),
    *(("linear", budget) for budget in (2400, 5000, 20000)),  # below about 1,800 steps an even schedule gives 7 or 8
])
def test_the_registry_cadence_gives_8_points_before_a_quarter_of_the_budget(schedule: str, budget: int) -> None:
    """On train.py's 256-point schedule over the twins' budgets (350 to 2,400 steps, the grokking runs' up to 5,000
    and beyond), the measure's cadence takes at least 8 values before a quarter of the budget."""
    every = get_measure("commutator").every_n_evals
    steps = evaluation_steps(budget, 256, schedule)
    measured = [step for index, step in enumerate(steps) if index % every == 0]
    assert sum(step < budget / 4 for step in measured) >= 8
