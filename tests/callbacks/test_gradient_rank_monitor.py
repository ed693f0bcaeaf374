from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch import Callback, Trainer, seed_everything
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.data import DistributedSampler

from capgeo_callbacks import PrecursorDetector
from capgeo_callbacks.callbacks.gradient_rank_monitor import GradientRankMonitor
from capgeo_callbacks.capture.batches import answer_cross_entropy, default_forward
from capgeo_callbacks.measures.gradients import (
    gradient_covariance_rank,
    gradient_effective_rank,
    per_example_gradients,
)
from tests.callbacks.conftest import ForeignEncoder, loaders, read_events, sum_mod_data
from tests.callbacks.helpers import (
    TinyAnswerLM,
    ValuesAtValidationEnd,
    answer_loaders,
    assert_identical_training,
    first_examples,
    fit,
    make_trainer,
    tuple_labels,
    tuple_loss,
)

TAGS = ["grad_erank", "grad_cov_rank", "grad_cov_numerical_rank"]
DDP_SPAWN_SCRIPT = Path(__file__).with_name("ddp_spawn_script.py")


def test_logged_at_evaluations_and_equal_to_the_pure_functions(tmp_path: Path) -> None:
    monitor = GradientRankMonitor(loss_fn=tuple_loss, batch_size=48)
    reader = ValuesAtValidationEnd(monitor)
    detector = PrecursorDetector(monitor="val_acc", logprob_monitor=None, overhead_budget=None)
    model, trainer = fit(tmp_path, [reader, detector, monitor])
    assert [s for s, _ in monitor.series["grad_erank"]] == [8, 16, 24]  # the sanity check is not measured
    # the fixed batch is the first 48 examples, cached across the first two training batches of 32
    x, y = first_examples(48)
    assert torch.equal(monitor.fixed_batch[0], x) and torch.equal(monitor.fixed_batch[1], y)
    # present when on_validation_end runs, whatever the callback order, and seen by the detector
    assert sorted(reader.seen) == [8, 16, 24] and all(set(v) == set(TAGS) for v in reader.seen.values())
    assert [s for s, _ in detector.summary["series"]["grad_erank"]] == [8, 16, 24]

    events = read_events(tmp_path)
    val_steps = [e.step for e in events.Scalars("val_acc")]
    for tag in TAGS:
        assert [e.step for e in events.Scalars(tag)] == val_steps  # logged beside val_acc
    model.eval()
    with sdpa_kernel([SDPBackend.MATH]):  # as the monitor (the fused CPU kernel has no vmap rule)
        grads = per_example_gradients(model, tuple_loss, (x, y))
    cov_rank, numerical_rank = gradient_covariance_rank(grads)
    last = reader.seen[24]
    assert last["grad_erank"] == pytest.approx(gradient_effective_rank(grads), rel=1e-5)
    assert last["grad_cov_rank"] == pytest.approx(cov_rank, rel=1e-5)
    assert last["grad_cov_numerical_rank"] == numerical_rank
    assert events.Scalars("grad_erank")[-1].value == pytest.approx(last["grad_erank"], rel=1e-6)

    # Trainer.validate runs under torch.inference_mode: the monitor leaves it and measures the same value
    trainer.validate(model, loaders()[1], verbose=False)
    assert monitor.series["grad_erank"][-1] == [24, pytest.approx(last["grad_erank"], rel=1e-9)]


def test_dict_batches_use_the_answer_masked_loss_by_default(tmp_path: Path) -> None:
    monitor = GradientRankMonitor(batch_size=32)
    model, _ = fit(tmp_path, [monitor], steps=16, model=TinyAnswerLM())
    assert [s for s, _ in monitor.series["grad_erank"]] == [8, 16]
    model.eval()
    examples = answer_loaders()[0].dataset[:32]
    batch = {key: torch.stack([example[key] for example in examples]) for key in monitor.fixed_batch}
    assert all(torch.equal(batch[key], monitor.fixed_batch[key]) for key in batch)
    with sdpa_kernel([SDPBackend.MATH]):
        expected = gradient_effective_rank(per_example_gradients(model, answer_cross_entropy, batch,
                                                                  forward=default_forward))
    assert monitor.series["grad_erank"][-1][1] == pytest.approx(expected, rel=1e-5)


def test_every_n_evals(tmp_path: Path) -> None:
    monitor = GradientRankMonitor(loss_fn=tuple_loss, batch_size=16, every_n_evals=2)
    fit(tmp_path, [monitor], steps=32)
    assert [s for s, _ in monitor.series["grad_erank"]] == [8, 24]
    assert monitor.evaluations == 4


def test_observing_does_not_change_training(tmp_path: Path) -> None:
    assert_identical_training(tmp_path, [GradientRankMonitor(loss_fn=tuple_loss, batch_size=32)])


def test_tuple_batches_without_loss_fn_raise_a_clear_error(tmp_path: Path) -> None:
    needs = r"needs a dict batch with keys \['input_ids', 'targets', 'answer_mask'\]"
    with pytest.raises(ValueError, match=needs):
        fit(tmp_path, [GradientRankMonitor()], steps=8)


def test_non_finite_gradients_are_skipped_with_one_warning(tmp_path: Path) -> None:
    def nan_loss(output: Tensor, batch: Sequence[Tensor]) -> Tensor:
        return tuple_loss(output, batch) * float("nan")

    monitor = GradientRankMonitor(loss_fn=nan_loss, batch_size=16)
    with pytest.warns(UserWarning, match="non-finite per-example gradients at step 8") as record:
        _, trainer = fit(tmp_path, [monitor], steps=16)
    assert trainer.global_step == 16 and monitor.series == {}
    assert sum("non-finite" in str(w.message) for w in record) == 1


def test_a_failing_measure_warns_and_training_goes_on(tmp_path: Path) -> None:
    def broken_loss(output: Tensor, batch: Sequence[Tensor]) -> Tensor:
        raise RuntimeError("boom")

    monitor = GradientRankMonitor(loss_fn=broken_loss, batch_size=16)
    with pytest.warns(UserWarning, match=r"measuring at step 8 failed \(RuntimeError: boom\)"):
        _, trainer = fit(tmp_path, [monitor], steps=16)
    assert trainer.global_step == 16 and monitor.series == {}


def test_validate_before_fit_warns_and_fit_still_measures(tmp_path: Path) -> None:
    monitor = GradientRankMonitor(loss_fn=tuple_loss, batch_size=16)
    seed_everything(0, verbose=False)
    model, (train, val) = ForeignEncoder(), loaders()
    trainer = make_trainer(tmp_path, [monitor], steps=16)
    with pytest.warns(UserWarning, match="no training batch has been seen"):
        trainer.validate(model, val, verbose=False)
    trainer.fit(model, train, val)
    assert [s for s, _ in monitor.series["grad_erank"]] == [8, 16]


def test_state_dict_round_trip_keeps_the_fixed_batch() -> None:
    monitor = GradientRankMonitor(loss_fn=tuple_loss, batch_size=4)
    monitor.cache(first_examples(6))
    monitor.series = {"grad_erank": [[8, 3.0], [16, 2.5]]}
    monitor.evaluations = 2
    restored = GradientRankMonitor(loss_fn=tuple_loss, batch_size=4)
    restored.load_state_dict(monitor.state_dict())
    assert restored.series == monitor.series and restored.evaluations == 2
    assert torch.equal(restored.fixed_batch[0], first_examples(4)[0])
    restored.cache(first_examples(8))
    assert restored.fixed_batch[0].shape[0] == 4  # frozen: not re-cached after a resume
    restored.load_state_dict({})  # tolerates missing keys
    assert restored.series == {} and restored.fixed_batch is None
    assert GradientRankMonitor(batch_size=8).state_key != GradientRankMonitor(batch_size=16).state_key


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        GradientRankMonitor(batch_size=1)
    with pytest.raises(ValueError, match="chunk_size"):
        GradientRankMonitor(chunk_size=0)
    with pytest.raises(ValueError, match="every_n_evals"):
        GradientRankMonitor(every_n_evals=0)
    with pytest.raises(ValueError, match="loss_fn must be callable"):
        GradientRankMonitor(loss_fn="cross_entropy")  # type: ignore[arg-type]


# -- DDP (all four monitors in one run, to spawn processes once) ---------------------------------------
class SameOnEveryRank(Callback):
    """Fails the run unless every rank holds the same values of ``monitors`` at each evaluation."""

    def __init__(self, monitors: list[Any], tags: list[str]) -> None:
        self.monitors, self.tags = monitors, tags

    def on_validation_end(self, trainer: Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        values: dict[str, float] = {}
        for monitor in self.monitors:
            values.update(monitor.values_at(trainer.global_step))
        local = torch.tensor([values.get(tag, float("nan")) for tag in self.tags], dtype=torch.float64)
        every = trainer.strategy.all_gather(local)  # (world, tags)
        assert every.shape[0] == 2 and torch.equal(every[0], every[1]), (self.tags, every)


@pytest.mark.slow
def test_under_ddp_every_rank_measures_rank_zeros_batch(tmp_path: Path) -> None:
    # in a process of its own: ddp_spawn's ranks are children of the process that calls fit, and a rank aborting at its
    # exit (gloo's teardown did, under load) must fail this test with its output, never end the pytest process (or
    # the pytest-xdist worker) that runs the rest of the suite
    done = subprocess.run([sys.executable, str(DDP_SPAWN_SCRIPT), str(tmp_path)], capture_output=True, text=True,
                          timeout=300, cwd=DDP_SPAWN_SCRIPT.parents[2], env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "ok").is_file()


def check_every_rank_measures_rank_zeros_batch(root: Path) -> None:
    """Run by ddp_spawn_script.py: the four monitors under ddp_spawn, each checked against the pure function on rank
    zero's first batch."""
    from capgeo_callbacks.callbacks.hessian_monitor import HessianMonitor
    from capgeo_callbacks.callbacks.linear_probe_monitor import LinearProbeMonitor
    from capgeo_callbacks.callbacks.llc_monitor import LLCMonitor, detached_from_trainer
    from capgeo_callbacks.measures.hessian import hessian_top_eigenvalues
    from capgeo_callbacks.measures.llc import estimate_llc
    from capgeo_callbacks.measures.probes import distinct_split, linear_probe_accuracy

    monitors = [
        GradientRankMonitor(loss_fn=tuple_loss, batch_size=32),
        HessianMonitor(loss_fn=tuple_loss, k=1, every_n_evals=1, batch_size=32),
        LLCMonitor(loss_fn=tuple_loss, every_n_evals=1, num_chains=2, num_draws=10, batch_size=32,
                   num_batches=1),
        LinearProbeMonitor(layers="encoder.layers.1", selector="mean", labels_fn=tuple_labels, num_rows=256),
    ]
    tags = ["grad_erank", "hessian/eig_0", "llc", "probe_acc/encoder.layers.1"]
    seed_everything(0, verbose=False)
    model = ForeignEncoder()
    train, val = loaders()
    trainer = Trainer(
        strategy="ddp_spawn", accelerator="cpu", devices=2, max_steps=16, val_check_interval=8,
        logger=TensorBoardLogger(str(root), name="", version=""),
        callbacks=[*monitors, SameOnEveryRank(monitors, tags)], enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
    )
    trainer.fit(model, train, val)  # an assertion failing on a rank, or a mismatched collective, fails it
    events = read_events(root)
    logged = {tag: events.Scalars(tag)[-1].value for tag in tags}  # rank zero's, at step 16
    assert [e.step for e in events.Scalars("grad_erank")] == [7, 15]  # where Lightning logs val metrics too
    assert [e.step for e in events.Scalars("grad_erank")] == [e.step for e in events.Scalars("probe_acc/"
                                                                                             "encoder.layers.1")]

    # rank zero's first batch under Lightning's DistributedSampler (shuffled, seed 0); rank one's differs
    data = sum_mod_data(512, 0)
    first = list(DistributedSampler(data, num_replicas=2, rank=0, shuffle=True, seed=0))[:32]
    assert first != list(DistributedSampler(data, num_replicas=2, rank=1, shuffle=True, seed=0))[:32]
    batch = (data.tensors[0][first], data.tensors[1][first])
    model.eval()
    with sdpa_kernel([SDPBackend.MATH]):
        erank = gradient_effective_rank(per_example_gradients(model, tuple_loss, batch))
        eig = hessian_top_eigenvalues(lambda: tuple_loss(model(batch[0]), batch), list(model.parameters()), 1)
        with detached_from_trainer(model):
            llc = estimate_llc(model, tuple_loss, [batch], num_chains=2, num_draws=10)["llc_mean"]
    assert logged["grad_erank"] == pytest.approx(erank, rel=1e-5)
    assert logged["hessian/eig_0"] == pytest.approx(float(eig[0]), rel=1e-5)
    assert logged["llc"] == pytest.approx(llc, rel=1e-4, abs=1e-6)

    # probe rows gathered in rank order (rank zero's validation examples, even and unshuffled, then rank one's,
    # odd), split as the monitor splits them: about the first half fits, with no input shared by the halves
    rows: list[Tensor] = []
    handle = model.encoder.layers[1].register_forward_hook(lambda m, a, out: rows.append(out.mean(dim=1)))
    vx, vy = sum_mod_data(256, 1).tensors
    with torch.no_grad():
        model(vx)
    handle.remove()
    gathered, labels = torch.cat([rows[0][0::2], rows[0][1::2]]), torch.cat([vy[0::2], vy[1::2]])
    fit = distinct_split(gathered)
    expected = linear_probe_accuracy(gathered[fit], labels[fit], gathered[~fit], labels[~fit])
    assert logged["probe_acc/encoder.layers.1"] == pytest.approx(expected, abs=1e-6)
