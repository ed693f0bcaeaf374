from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from capgeo_callbacks.callbacks.llc_monitor import LLCMonitor, detached_from_trainer
from capgeo_callbacks.measures.llc import estimate_llc
from tests.callbacks.conftest import read_events
from tests.callbacks.helpers import (
    TinyAnswerLM,
    ValuesAtValidationEnd,
    assert_identical_training,
    first_examples,
    fit,
    tuple_loss,
)

TAGS = ["llc", "llc_std", "llc_fraction_below_init"]


def small(**overrides: object) -> LLCMonitor:
    settings: dict = {"loss_fn": tuple_loss, "every_n_evals": 1, "num_draws": 20, "batch_size": 32,
                      "num_batches": 2, "lr": 1e-4, "localization": 100.0}
    return LLCMonitor(**{**settings, **overrides})


@pytest.mark.slow
def test_logged_at_evaluations_and_equal_to_estimate_llc(tmp_path: Path) -> None:
    monitor = small()
    reader = ValuesAtValidationEnd(monitor)
    model, trainer = fit(tmp_path, [reader, monitor])
    assert sorted(reader.seen) == [8, 16, 24] and all(set(v) == set(TAGS) for v in reader.seen.values())
    events = read_events(tmp_path)
    val_steps = [e.step for e in events.Scalars("val_acc")]
    for tag in TAGS:
        assert [e.step for e in events.Scalars(tag)] == val_steps
    assert model.trainer is trainer  # the Trainer reference is restored after each copy

    x, y = first_examples(64)
    assert torch.equal(monitor.fixed_batch[0], x)
    batches = [(x[:32], y[:32]), (x[32:], y[32:])]
    with detached_from_trainer(model), sdpa_kernel([SDPBackend.MATH]):
        expected = estimate_llc(model, tuple_loss, batches, num_chains=4, num_draws=20, lr=1e-4,
                                localization=100.0, seed=0)
    last = reader.seen[24]
    assert last["llc"] == pytest.approx(expected["llc_mean"], rel=1e-5)
    assert last["llc_std"] == pytest.approx(expected["llc_std"], rel=1e-4)
    assert last["llc_fraction_below_init"] == pytest.approx(expected["fraction_below_init"])
    assert monitor.last_estimate["step"] == 24
    trace = torch.tensor(monitor.last_estimate["loss_trace"], dtype=torch.float64)
    assert trace.shape == (4, 20)
    torch.testing.assert_close(trace, expected["loss_trace"], rtol=1e-5, atol=1e-7)
    assert monitor.last_estimate["nbeta"] == pytest.approx(32 / math.log(32))


def test_dict_batches_use_the_answer_masked_loss_by_default(tmp_path: Path) -> None:
    monitor = LLCMonitor(every_n_evals=1, num_chains=2, num_draws=10, batch_size=32, num_batches=1)
    fit(tmp_path, [monitor], steps=8, model=TinyAnswerLM())
    assert [s for s, _ in monitor.series["llc"]] == [8]
    assert math.isfinite(monitor.series["llc"][0][1])


def test_every_n_evals(tmp_path: Path) -> None:
    monitor = small(every_n_evals=2, num_chains=2, num_draws=5)
    fit(tmp_path, [monitor], steps=32)
    assert [s for s, _ in monitor.series["llc"]] == [8, 24]


def test_observing_does_not_change_training(tmp_path: Path) -> None:
    assert_identical_training(tmp_path, [small()])


def test_divergence_warns_once_naming_the_step_and_skips(tmp_path: Path) -> None:
    monitor = small(lr=10.0, localization=0.0, num_chains=2)
    with pytest.warns(UserWarning, match="2 of 2 SGLD chains diverged at step 8") as record:
        _, trainer = fit(tmp_path, [monitor], steps=16)
    assert trainer.global_step == 16
    assert "llc" not in monitor.series  # every chain diverged: no estimate
    assert sum("diverged" in str(w.message) for w in record) == 1


def test_negative_estimate_warns(tmp_path: Path) -> None:
    # far from a minimum, with a cold posterior and no pull back, SGLD mostly descends: L(w) < L(w*)
    monitor = small(nbeta=1e4, lr=1e-5, localization=0.0, num_chains=2)
    with pytest.warns(UserWarning, match=r"negative LLC estimate \(-[\d.e+]+\) at step 8"):
        fit(tmp_path, [monitor], steps=8)
    assert monitor.series["llc"][0][1] < 0
    assert monitor.series["llc_fraction_below_init"][0][1] > 0.5


def test_state_dict_round_trip_keeps_the_last_trace() -> None:
    monitor = small()
    monitor.series = {"llc": [[16, 3.0]]}
    monitor.evaluations = 16
    monitor.last_estimate = {"step": 16, "loss_trace": [[1.0, 0.9]], "init_loss": 1.0}
    restored = small()
    restored.load_state_dict(monitor.state_dict())
    assert restored.series == monitor.series and restored.evaluations == 16
    assert restored.last_estimate == monitor.last_estimate
    restored.load_state_dict({})
    assert restored.series == {} and restored.last_estimate == {} and restored.fixed_batch is None
    assert small(lr=1e-4).state_key != small(lr=1e-3).state_key


def test_bad_arguments_raise() -> None:
    for name in ("num_chains", "num_draws", "batch_size", "num_batches"):
        with pytest.raises(ValueError, match=name):
            LLCMonitor(**{name: 0})
    with pytest.raises(ValueError, match="lr"):
        LLCMonitor(lr=0.0)
    with pytest.raises(ValueError, match="localization"):
        LLCMonitor(localization=-1.0)
    with pytest.raises(ValueError, match="nbeta"):
        LLCMonitor(nbeta=-2.0)


def test_the_copy_leaves_out_every_trainer_and_each_gets_its_own_back() -> None:
    """A LightningModule holding another (a wrapped model): the deep copy made inside ``detached_from_trainer`` has no
    Trainer at any level, and afterwards each module has its own again (the parent's setter reaches its child)."""
    import copy

    from lightning.pytorch import Trainer

    outer, inner = TinyAnswerLM(), TinyAnswerLM()
    outer.inner = inner
    first, second = (Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False) for _ in range(2))
    outer.trainer = first
    inner.trainer = second
    with detached_from_trainer(outer):
        copied = copy.deepcopy(outer)
    for module in (copied, copied.inner):
        with pytest.raises(RuntimeError, match="not attached to a `Trainer`"):
            module.trainer  # noqa: B018 - the property raises when there is none
    assert outer.trainer is first and inner.trainer is second
