from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, Trainer, seed_everything
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.data import DataLoader, DistributedSampler

from capgeo_callbacks import PrecursorDetector
from capgeo_callbacks.callbacks.gradient_rank_monitor import GradientRankMonitor, answer_cross_entropy
from capgeo_callbacks.measures.gradients import (
    gradient_covariance_rank,
    gradient_effective_rank,
    per_example_gradients,
)
from tests.callbacks.conftest import ForeignEncoder, loaders, read_events, sum_mod_data


# -- shared by the gradient-based callbacks' tests ------------------------------------------------
def tuple_loss(output: Tensor, batch: Sequence[Tensor]) -> Tensor:
    """The loss of ForeignEncoder's (x, y) batches."""
    return F.cross_entropy(output, batch[1])


def tuple_labels(batch: Sequence[Tensor]) -> Tensor:
    """The labels of ForeignEncoder's (x, y) batches, one per sequence."""
    return batch[1]


class _Block(nn.Module):
    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(self.ln_1(x)).unsqueeze(1).chunk(3, dim=-1)  # (B, 1, T, D) each
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).squeeze(1))
        return x + self.mlp(self.ln_2(x))


class TinyAnswerLM(pl.LightningModule):
    """A capgeo-like model: dict batches (input_ids, targets, answer_mask), ``blocks.*`` and ``norm_f``,
    attention through the fused SDPA kernel (no double backward unless the math path is forced)."""

    def __init__(self, vocab: int = 11, d_model: int = 16, seq_len: int = 8) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList([_Block(d_model)])
        self.norm_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, input_ids: Tensor) -> Tensor:
        x = self.embed(input_ids) + self.pos.weight[: input_ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm_f(x))

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return answer_cross_entropy(self(batch["input_ids"]), batch)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        right = (self(batch["input_ids"]).argmax(-1) == batch["targets"]) | ~batch["answer_mask"]
        self.log("val_acc", right.all(dim=1).float().mean(), batch_size=len(right))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def reverse_data(n: int, seed: int, digits: int = 4) -> list[dict[str, Tensor]]:
    """``d1 d2 d3 d4 = d4 d3 d2 d1``: inputs and next-token targets, the mask on the answer tokens."""
    x = torch.randint(0, 10, (n, digits), generator=torch.Generator().manual_seed(seed))
    seq = torch.cat([x, torch.full((n, 1), 10), x.flip(1)], dim=1)
    mask = torch.zeros(n, 2 * digits, dtype=torch.bool)
    mask[:, digits:] = True
    return [{"input_ids": seq[i, :-1], "targets": seq[i, 1:], "answer_mask": mask[i]} for i in range(n)]


def answer_loaders() -> tuple[DataLoader, DataLoader]:
    return (DataLoader(reverse_data(512, 0), batch_size=32, shuffle=False),
            DataLoader(reverse_data(128, 1), batch_size=64, shuffle=False))


def make_trainer(path: Path, callbacks: list[Callback], steps: int = 24) -> Trainer:
    return Trainer(
        max_steps=steps, val_check_interval=8, logger=TensorBoardLogger(str(path), name="", version=""),
        callbacks=callbacks, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, num_sanity_val_steps=1, accelerator="cpu", deterministic=True,
    )


def fit(path: Path, callbacks: list[Callback], steps: int = 24, model: pl.LightningModule | None = None,
        seed: int = 0) -> tuple[pl.LightningModule, Trainer]:
    seed_everything(seed, verbose=False)
    model = ForeignEncoder() if model is None else model
    train, val = loaders() if isinstance(model, ForeignEncoder) else answer_loaders()
    trainer = make_trainer(path, callbacks, steps)
    trainer.fit(model, train, val)
    return model, trainer


def assert_identical_training(path: Path, callbacks: list[Callback], steps: int = 16) -> None:
    """Training with ``callbacks`` ends at bit-identical weights, optimizer state and RNG state."""
    plain, plain_trainer = fit(path / "plain", [], steps=steps)
    plain_rng = torch.get_rng_state()
    watched, watched_trainer = fit(path / "watched", callbacks, steps=steps)
    assert torch.equal(plain_rng, torch.get_rng_state())
    for (name, a), (_, b) in zip(plain.state_dict().items(), watched.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    for a, b in zip(plain.parameters(), watched.parameters(), strict=True):
        assert (a.grad is None) == (b.grad is None) and (a.grad is None or torch.equal(a.grad, b.grad))
    plain_opt = plain_trainer.optimizers[0].state_dict()
    watched_opt = watched_trainer.optimizers[0].state_dict()
    assert plain_opt["param_groups"] == watched_opt["param_groups"]
    for key, state in plain_opt["state"].items():
        for field, value in state.items():
            assert torch.equal(value, watched_opt["state"][key][field]), (key, field)


class ValuesAtValidationEnd(Callback):
    """Reads ``monitor.values_at(step)`` in ``on_validation_end``, as PrecursorDetector does; listed before
    the monitor, so it runs first."""

    def __init__(self, monitor: Any) -> None:
        self.monitor = monitor
        self.seen: dict[int, dict[str, float]] = {}

    def on_validation_end(self, trainer: Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.seen[trainer.global_step] = self.monitor.values_at(trainer.global_step)


def first_examples(n: int) -> tuple[Tensor, Tensor]:
    x, y = sum_mod_data(512, 0).tensors
    return x[:n], y[:n]


# -- GradientRankMonitor ---------------------------------------------------------------------------
TAGS = ["grad_erank", "grad_cov_rank", "grad_cov_numerical_rank"]


def test_logged_at_evaluations_and_equal_to_the_pure_functions(tmp_path: Path) -> None:
    monitor = GradientRankMonitor(loss_fn=tuple_loss, batch_size=48)
    reader = ValuesAtValidationEnd(monitor)
    detector = PrecursorDetector(monitor="val_acc", logprob_monitor=None)
    model, trainer = fit(tmp_path, [reader, detector, monitor])
    assert [s for s, _ in monitor.series["grad_erank"]] == [8, 16, 24]  # the sanity check is not measured
    # the fixed batch is the first 48 examples, cached across the first two training batches of 32
    x, y = first_examples(48)
    assert torch.equal(monitor.fixed_batch[0], x) and torch.equal(monitor.fixed_batch[1], y)
    # present when on_validation_end runs, whatever the callback order, and seen by the detector
    assert sorted(reader.seen) == [8, 16, 24] and all(set(v) == set(TAGS) for v in reader.seen.values())
    assert [s for s, _ in detector.measure_series["grad_erank"]] == [8, 16, 24]

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
        expected = gradient_effective_rank(per_example_gradients(model, answer_cross_entropy, batch))
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
    monitor.on_train_batch_start(None, None, first_examples(6), 0)  # type: ignore[arg-type]
    monitor.series = {"grad_erank": [[8, 3.0], [16, 2.5]]}
    monitor.evaluations = 2
    restored = GradientRankMonitor(loss_fn=tuple_loss, batch_size=4)
    restored.load_state_dict(monitor.state_dict())
    assert restored.series == monitor.series and restored.evaluations == 2
    assert torch.equal(restored.fixed_batch[0], first_examples(4)[0])
    restored.on_train_batch_start(None, None, first_examples(8), 0)  # type: ignore[arg-type]
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
    from capgeo_callbacks.callbacks.hessian_monitor import HessianMonitor
    from capgeo_callbacks.callbacks.linear_probe_monitor import LinearProbeMonitor
    from capgeo_callbacks.callbacks.llc_monitor import LLCMonitor, detached_from_trainer
    from capgeo_callbacks.measures.hessian import hessian_top_eigenvalues
    from capgeo_callbacks.measures.llc import estimate_llc
    from capgeo_callbacks.measures.probes import linear_probe_accuracy

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
        logger=TensorBoardLogger(str(tmp_path), name="", version=""),
        callbacks=[*monitors, SameOnEveryRank(monitors, tags)], enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
    )
    trainer.fit(model, train, val)  # an assertion failing on a rank, or a mismatched collective, fails it
    logged = {tag: float(trainer.callback_metrics[tag]) for tag in tags}  # rank zero's, at step 16
    assert [e.step for e in read_events(tmp_path).Scalars("grad_erank")] == [7, 15]

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

    # probe rows gathered in rank order: rank zero's validation examples (even, unshuffled) fit, rank one's
    # (odd) are scored
    rows: list[Tensor] = []
    handle = model.encoder.layers[1].register_forward_hook(lambda m, a, out: rows.append(out.mean(dim=1)))
    vx, vy = sum_mod_data(256, 1).tensors
    with torch.no_grad():
        model(vx)
    handle.remove()
    expected = linear_probe_accuracy(rows[0][0::2], vy[0::2], rows[0][1::2], vy[1::2])
    assert logged["probe_acc/encoder.layers.1"] == pytest.approx(expected, abs=1e-6)
