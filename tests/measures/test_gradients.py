"""Per-example gradients against a loop of single-example backward passes; gradient ranks against
spectra known by construction."""

from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

from capgeo_callbacks.capture.batches import default_forward
from capgeo_callbacks.measures.gradients import (
    gradient_covariance_rank,
    gradient_effective_rank,
    per_example_gradients,
)

# vmap over CPU flash attention uses torch's (correct, slower) batching fallback and says so.
pytestmark = pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")


class TinyAttention(nn.Module):
    """Embedding, one causal self-attention layer (fused SDPA), unembedding: ids (B, T) -> logits."""

    def __init__(self, vocab: int = 11, dim: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.unembed = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.embed(ids)
        batch, seq, dim = x.shape
        q, k, v = (t.view(batch, seq, self.heads, -1).transpose(1, 2) for t in self.qkv(x).split(dim, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(batch, seq, dim)
        return self.unembed(self.norm(x + self.proj(y)))


def answer_loss(logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
    per_token = F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), reduction="none")
    mask = batch["answer_mask"].flatten().to(per_token.dtype)
    return (per_token * mask).sum() / mask.sum().clamp_min(1.0)


def xy_loss(output: Tensor, batch: tuple[Tensor, Tensor]) -> Tensor:
    return F.cross_entropy(output, batch[1])


def reference_gradients(model: nn.Module, loss_fn, examples: list) -> Tensor:
    """One ``loss.backward()`` per one-example batch, on a copy of the model."""
    model = copy.deepcopy(model)
    rows = []
    for example in examples:
        model.zero_grad(set_to_none=False)
        loss_fn(default_forward(model, example), example).backward()
        rows.append(torch.cat([p.grad.reshape(-1).clone() for p in model.parameters() if p.requires_grad]))
    return torch.stack(rows)


def mlp_and_batch(seed: int = 0, batch: int = 12) -> tuple[nn.Module, tuple[Tensor, Tensor]]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 4))
    return model, (torch.randn(batch, 5), torch.randint(0, 4, (batch,)))


def attention_and_batch(seed: int = 0, batch: int = 6) -> tuple[nn.Module, dict[str, Tensor]]:
    torch.manual_seed(seed)
    ids = torch.randint(0, 11, (batch, 7))
    mask = torch.zeros(batch, 7, dtype=torch.bool)
    mask[:, -2:] = True
    return TinyAttention(), {"input_ids": ids, "targets": torch.roll(ids, -1, dims=1), "answer_mask": mask}


def test_mlp_matches_single_example_backward() -> None:
    model, (x, y) = mlp_and_batch()
    grads = per_example_gradients(model, xy_loss, (x, y))
    expected = reference_gradients(model, xy_loss, [(x[i : i + 1], y[i : i + 1]) for i in range(len(x))])
    assert grads.shape == (12, sum(p.numel() for p in model.parameters()))
    torch.testing.assert_close(grads, expected, rtol=1e-5, atol=1e-6)
    # The mean of the per-example gradients is the batch gradient.
    model.zero_grad()
    xy_loss(model(x), (x, y)).backward()
    batch_grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    torch.testing.assert_close(grads.mean(0), batch_grad, rtol=1e-5, atol=1e-6)


def test_attention_dict_batch_matches_single_example_backward() -> None:
    model, batch = attention_and_batch()
    grads = per_example_gradients(model, answer_loss, batch, forward=default_forward)
    examples = [{key: value[i : i + 1] for key, value in batch.items()} for i in range(6)]
    torch.testing.assert_close(grads, reference_gradients(model, answer_loss, examples), rtol=1e-5, atol=1e-6)


def test_chunked_equals_unchunked_and_custom_forward() -> None:
    model, (x, y) = mlp_and_batch(batch=10)
    whole = per_example_gradients(model, xy_loss, (x, y))
    chunked = per_example_gradients(model, xy_loss, (x, y), chunk_size=3)
    torch.testing.assert_close(chunked, whole)
    batch = {"features": x, "labels": y}
    custom = per_example_gradients(
        model, lambda out, b: F.cross_entropy(out, b["labels"]), batch, forward=lambda m, b: m(b["features"])
    )
    torch.testing.assert_close(custom, whole)


class InPlaceModel(nn.Module):
    """Writes into a freshly allocated (unbatched) tensor, which vmap cannot do."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(5, 4)

    def forward(self, x: Tensor) -> Tensor:
        out = torch.zeros(x.shape[0], 4)
        out += self.linear(x)
        return out


def test_falls_back_to_a_loop_with_a_warning_when_vmap_fails() -> None:
    torch.manual_seed(1)
    model = InPlaceModel()
    x, y = torch.randn(8, 5), torch.randint(0, 4, (8,))
    with pytest.warns(RuntimeWarning, match="falling back"):
        grads = per_example_gradients(model, xy_loss, (x, y))
    expected = reference_gradients(model, xy_loss, [(x[i : i + 1], y[i : i + 1]) for i in range(8)])
    torch.testing.assert_close(grads, expected, rtol=1e-5, atol=1e-6)


def test_model_parameters_grads_and_mode_untouched() -> None:
    for training in (True, False):
        model, batch = attention_and_batch()
        model.train(training)
        for p in model.parameters():
            p.grad = torch.full_like(p, 0.5)
        model.embed.weight.grad = None
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        per_example_gradients(model, answer_loss, batch, chunk_size=4, forward=default_forward)
        assert model.training is training
        assert all(m.training is training for m in model.modules())
        for name, p in model.named_parameters():
            assert torch.equal(p, before[name]), name
            if name == "embed.weight":
                assert p.grad is None
            else:
                assert torch.equal(p.grad, torch.full_like(p, 0.5)), name


class CountingModel(nn.Module):
    """Increments a buffer in place at every forward (as BatchNorm's running statistics do)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(5, 4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: Tensor) -> Tensor:
        self.calls.add_(1.0)
        return self.linear(x)


def test_buffers_updated_in_forward_are_left_alone() -> None:
    model = CountingModel()
    x, y = torch.randn(6, 5), torch.randint(0, 4, (6,))
    grads = per_example_gradients(model, xy_loss, (x, y))
    assert float(model.calls) == 0.0
    expected = reference_gradients(model, xy_loss, [(x[i : i + 1], y[i : i + 1]) for i in range(6)])
    torch.testing.assert_close(grads, expected, rtol=1e-5, atol=1e-6)


def test_only_trainable_parameters_in_named_parameters_order() -> None:
    model, (x, y) = mlp_and_batch()
    model[0].weight.requires_grad_(False)
    grads = per_example_gradients(model, xy_loss, (x, y))
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert grads.shape[1] == sum(p.numel() for p in trainable)
    expected = reference_gradients(model, xy_loss, [(x[i : i + 1], y[i : i + 1]) for i in range(len(x))])
    torch.testing.assert_close(grads, expected, rtol=1e-5, atol=1e-6)


def test_bad_inputs_raise() -> None:
    model, (x, y) = mlp_and_batch()
    with pytest.raises(ValueError, match="leading"):
        per_example_gradients(model, xy_loss, (x, y[:3]))
    with pytest.raises(ValueError, match="chunk_size"):
        per_example_gradients(model, xy_loss, (x, y), chunk_size=0)
    with pytest.raises(ValueError, match="scalar"):
        per_example_gradients(model, lambda out, b: out, (x, y))
    with pytest.raises(ValueError, match="forward="):  # a dict batch: the caller says how to call the model
        per_example_gradients(model, xy_loss, {"x": x, "y": y})
    frozen = nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(ValueError, match="requires_grad"):
        per_example_gradients(frozen, lambda out, b: out.sum(), torch.randn(3, 2))


def test_inputs_in_a_k_dim_subspace_give_numerical_rank_k() -> None:
    # Linear model without bias, squared error: g_i = 2 (w.x_i - y_i) x_i lies in span{x_i}, which is
    # k-dimensional; centring keeps it there. B = 64 examples, d = 20 inputs, k = 5.
    gen = torch.Generator().manual_seed(0)
    k, d, num = 5, 20, 64
    basis = torch.linalg.qr(torch.randn(d, k, generator=gen, dtype=torch.float64))[0]  # (d, k), orthonormal
    x64 = torch.randn(num, k, generator=gen, dtype=torch.float64) @ basis.T
    x, y = x64.float(), torch.randn(num, generator=gen)
    model = nn.Linear(d, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.randn(1, d, generator=gen))
    grads = per_example_gradients(model, lambda out, b: ((out.squeeze(-1) - b[1]) ** 2).mean(), (x, y))
    effective, numerical = gradient_covariance_rank(grads)
    assert numerical == k
    assert 1.0 <= effective <= k
    assert 1.0 <= gradient_effective_rank(grads) <= k + 1e-6
    # The same in float64 (the SVD path, float64 threshold), and one more direction with a bias
    # (its gradient is the residual r_i). A float32 G cast to float64 is not rank k at float64 precision.
    grads64 = per_example_gradients(
        model.double(), lambda out, b: ((out.squeeze(-1) - b[1]) ** 2).mean(), (x64, y.double())
    )
    assert grads64.dtype == torch.float64
    assert gradient_covariance_rank(grads64)[1] == k
    assert gradient_covariance_rank(grads.double())[1] > k
    model.float()
    with_bias = nn.Linear(d, 1)
    with torch.no_grad():
        with_bias.weight.copy_(model.weight)
    grads_bias = per_example_gradients(
        with_bias, lambda out, b: ((out.squeeze(-1) - b[1]) ** 2).mean(), (x, y)
    )
    assert gradient_covariance_rank(grads_bias)[1] == k + 1


def roy_vetterli(s: np.ndarray) -> float:
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-np.sum(p * np.log(p))))


def matrix_with_spectrum(s: list[float], rows: int, cols: int, *, centred: bool, seed: int = 0) -> Tensor:
    """U diag(s) V^T with orthonormal U (rows x r), V (cols x r); U orthogonal to 1 when centred."""
    gen = torch.Generator().manual_seed(seed)
    r = len(s)
    raw = torch.randn(rows, r + 1, generator=gen, dtype=torch.float64)
    if centred:
        raw[:, 0] = 1.0
        u = torch.linalg.qr(raw)[0][:, 1:]  # orthonormal and orthogonal to the ones vector
    else:
        u = torch.linalg.qr(raw[:, :r])[0]
    v = torch.linalg.qr(torch.randn(cols, r, generator=gen, dtype=torch.float64))[0]
    return u @ torch.diag(torch.tensor(s, dtype=torch.float64)) @ v.T


def test_effective_rank_matches_independent_formula_on_known_spectrum() -> None:
    s = [5.0, 3.0, 1.0, 0.5, 0.1]
    g = matrix_with_spectrum(s, rows=32, cols=300, centred=False)
    expected = roy_vetterli(np.array(s))
    assert gradient_effective_rank(g) == pytest.approx(expected, rel=1e-10)
    assert gradient_effective_rank(g.float()) == pytest.approx(expected, rel=1e-5)
    # Scale invariant, and equal to min(B, P) for orthogonal rows of equal norm.
    assert gradient_effective_rank(7.0 * g.float()) == pytest.approx(expected, rel=1e-5)
    assert gradient_effective_rank(torch.eye(6, 40)) == pytest.approx(6.0, rel=1e-6)


def test_covariance_rank_uses_the_centred_spectrum() -> None:
    s = [4.0, 2.0, 1.0, 0.25]
    centred = matrix_with_spectrum(s, rows=40, cols=120, centred=True, seed=3)
    gen = torch.Generator().manual_seed(4)
    shifted = centred + 3.0 * torch.randn(1, 120, generator=gen, dtype=torch.float64)  # a large common mean
    for g, rel in ((shifted, 1e-10), (shifted.float(), 1e-4)):
        effective, numerical = gradient_covariance_rank(g)
        assert numerical == len(s)
        assert effective == pytest.approx(roy_vetterli(np.array(s)), rel=rel)
    # Without centring the common mean dominates: a different (smaller) effective rank.
    assert gradient_effective_rank(shifted) < roy_vetterli(np.array(s)) - 0.5


def test_degenerate_and_invalid_inputs() -> None:
    assert gradient_effective_rank(torch.zeros(4, 10)) == 0.0
    assert gradient_covariance_rank(torch.zeros(4, 10)) == (0.0, 0)
    assert gradient_covariance_rank(torch.randn(1, 10)) == (0.0, 0)
    assert gradient_covariance_rank(torch.ones(5, 3)) == (0.0, 0)
    assert gradient_effective_rank(torch.randn(1, 10)) == pytest.approx(1.0)
    nan = torch.randn(3, 4)
    nan[0, 0] = math.nan
    assert math.isnan(gradient_effective_rank(nan))
    assert math.isnan(gradient_covariance_rank(nan)[0])
    for bad in (torch.randn(5), torch.randn(2, 3, 4), torch.zeros(0, 3)):
        with pytest.raises(ValueError):
            gradient_effective_rank(bad)
        with pytest.raises(ValueError):
            gradient_covariance_rank(bad)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 12), cols=st.integers(1, 30), seed=st.integers(0, 10_000))
def test_rank_bounds_hold_for_random_matrices(rows: int, cols: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(rows, cols, generator=gen)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        effective = gradient_effective_rank(g)
        cov_effective, numerical = gradient_covariance_rank(g)
    assert 1.0 - 1e-9 <= effective <= min(rows, cols) + 1e-6
    assert numerical <= min(rows - 1, cols)
    assert (numerical == 0 and cov_effective == 0.0) or 1.0 - 1e-9 <= cov_effective <= numerical + 1e-6
    assert numerical == int(torch.linalg.matrix_rank(g - g.mean(0), rtol=rows * torch.finfo(g.dtype).eps))
