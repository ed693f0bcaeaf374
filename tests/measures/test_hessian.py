"""Lanczos, Hutchinson and power iteration against Hessians formed exactly."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from capgeo_callbacks.measures.hessian import (
    hessian_top_eigenvalues,
    hessian_trace,
    hutchinson_trace,
    lanczos,
    power_iteration_top_eigenvalue,
)


class AttentionToy(nn.Module):
    """One softmax self-attention layer over real inputs, mean-pooled to class logits (float64)."""

    def __init__(self, dim: int = 6, classes: int = 3) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, classes)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        y = F.scaled_dot_product_attention(q, k, v)  # fused kernel: forced onto the math backend
        return self.out(torch.tanh(y).mean(dim=1))


def exact_hessian(model: nn.Module, loss_of_output, inputs: Tensor) -> Tensor:
    names = [name for name, _ in model.named_parameters()]
    params = [p.detach() for p in model.parameters()]
    shapes, numels = [p.shape for p in params], [p.numel() for p in params]

    def loss_of_flat(flat: Tensor) -> Tensor:
        pieces = {n: t.reshape(s) for n, t, s in zip(names, flat.split(numels), shapes, strict=True)}
        with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
            return loss_of_output(functional_call(model, pieces, (inputs,)))

    return torch.autograd.functional.hessian(loss_of_flat, torch.cat([p.reshape(-1) for p in params]))


def mlp_problem() -> tuple[nn.Module, Tensor, Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)).double()  # P = 212
    return model, torch.randn(96, 8, dtype=torch.float64), torch.randint(0, 4, (96,))


def attention_problem() -> tuple[nn.Module, Tensor, Tensor]:
    torch.manual_seed(1)
    model = AttentionToy().double()  # P = 129
    return model, torch.randn(32, 5, 6, dtype=torch.float64), torch.randint(0, 3, (32,))


@pytest.mark.parametrize("problem", [mlp_problem, attention_problem], ids=["tanh-mlp", "attention"])
def test_top_eigenvalues_match_exact_hessian(problem) -> None:
    model, x, y = problem()
    model.eval()
    params = list(model.parameters())
    dim = sum(p.numel() for p in params)
    expected = torch.linalg.eigvalsh(exact_hessian(model, lambda out: F.cross_entropy(out, y), x)).flip(0)[:3]
    result = lanczos(
        lambda: F.cross_entropy(model(x), y), params, k=3, generator=torch.Generator().manual_seed(3)
    )
    assert result.converged
    assert result.num_hvps < dim  # a Krylov space much smaller than P
    torch.testing.assert_close(result.eigenvalues, expected, rtol=1e-4, atol=0.0)
    assert result.eigenvalues.dtype == torch.float64
    assert bool((result.eigenvalues[:-1] >= result.eigenvalues[1:]).all())
    top = hessian_top_eigenvalues(lambda: F.cross_entropy(model(x), y), params, k=3)
    torch.testing.assert_close(top, expected, rtol=1e-4, atol=0.0)


def spectrum_quadratic(eigenvalues: Tensor, seed: int = 0) -> tuple[Tensor, Tensor]:
    """A = Q diag(eigenvalues) Q^T for a random orthogonal Q, and a parameter vector x."""
    gen = torch.Generator().manual_seed(seed)
    dim = eigenvalues.numel()
    q = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))[0]
    matrix = (q * eigenvalues) @ q.T
    x = torch.randn(dim, generator=gen, dtype=torch.float64).requires_grad_(True)
    return matrix, x


def test_quadratic_with_known_spectrum_gives_it_back() -> None:
    eigenvalues = torch.cat(
        [
            torch.tensor([10.0, 7.0, 5.0], dtype=torch.float64),
            torch.linspace(-2.0, 3.0, 197, dtype=torch.float64),
        ]
    )
    matrix, x = spectrum_quadratic(eigenvalues)
    closure = lambda: 0.5 * x @ matrix @ x  # noqa: E731 - Hessian = matrix
    top = hessian_top_eigenvalues(closure, [x], k=3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(top, torch.tensor([10.0, 7.0, 5.0], dtype=torch.float64), rtol=1e-6, atol=0.0)
    # Algebraic, not by magnitude: a large negative eigenvalue is not "top".
    negative = torch.cat(
        [torch.tensor([-50.0, 4.0, 2.0], dtype=torch.float64), torch.linspace(-1, 1, 57).double()]
    )
    matrix, x = spectrum_quadratic(negative, seed=1)
    top = hessian_top_eigenvalues(lambda: 0.5 * x @ matrix @ x, [x], k=2)
    torch.testing.assert_close(top, torch.tensor([4.0, 2.0], dtype=torch.float64), rtol=1e-6, atol=0.0)


def test_repeated_eigenvalue_breakdown_restarts() -> None:
    # H = 2 I: the Krylov space is invariant after one step; restarts must still give k values.
    x = torch.randn(20, dtype=torch.float64, requires_grad=True)
    top = hessian_top_eigenvalues(lambda: (x**2).sum(), [x], k=3)
    torch.testing.assert_close(top, torch.full((3,), 2.0, dtype=torch.float64))


def test_hutchinson_trace_within_its_standard_error() -> None:
    model, x, y = mlp_problem()
    hessian = exact_hessian(model, lambda out: F.cross_entropy(out, y), x)
    num_samples = 64
    # Rademacher probes: Var(v^T H v) = 2 (||H||_F^2 - sum_i H_ii^2).
    std_error = math.sqrt(
        2 * (float((hessian**2).sum()) - float((hessian.diagonal() ** 2).sum())) / num_samples
    )
    closure = lambda: F.cross_entropy(model(x), y)  # noqa: E731
    estimate = hutchinson_trace(
        closure, list(model.parameters()), num_samples, generator=torch.Generator().manual_seed(0)
    )
    assert abs(estimate.trace - float(hessian.trace())) <= 3 * std_error
    assert estimate.std_error == pytest.approx(std_error, rel=0.5)
    assert estimate.num_hvps == num_samples
    assert hessian_trace(closure, list(model.parameters()), num_samples) == pytest.approx(
        hutchinson_trace(closure, list(model.parameters()), num_samples).trace
    )
    # Exact for a diagonal Hessian (v^T D v = tr D for every Rademacher v).
    z = torch.randn(30, dtype=torch.float64, requires_grad=True)
    weights = torch.arange(30, dtype=torch.float64)
    assert hessian_trace(lambda: (weights * z**2).sum(), [z], 4) == pytest.approx(2 * float(weights.sum()))


def first_iterations_within(relative_error: float, run, upper: int) -> int:
    """Smallest HVP budget n in [1, upper] with run(n) within relative_error (binary search; the
    top Ritz value and the power-iteration Rayleigh quotient on a PSD matrix only improve with n)."""
    low, high = 1, upper
    assert run(upper) <= relative_error, "upper budget does not reach the accuracy"
    while low < high:
        mid = (low + high) // 2
        if run(mid) <= relative_error:
            high = mid
        else:
            low = mid + 1
    return low


@pytest.mark.slow
def test_lanczos_needs_fewer_hvps_than_power_iteration_for_one_percent() -> None:
    # PSD spectrum with a small gap: 1, 0.99, 0.98 then 397 values spread over [0, 0.97].
    eigenvalues = torch.cat(
        [
            torch.tensor([1.0, 0.99, 0.98], dtype=torch.float64),
            torch.linspace(0.0, 0.97, 397, dtype=torch.float64),
        ]
    )
    matrix, x = spectrum_quadratic(eigenvalues, seed=2)
    closure = lambda: 0.5 * x @ matrix @ x  # noqa: E731

    def lanczos_error(n: int) -> float:
        gen = torch.Generator().manual_seed(5)
        result = lanczos(closure, [x], k=1, num_iterations=n, tol=0.0, generator=gen)
        assert result.num_hvps == n
        return abs(float(result.eigenvalues[0]) - 1.0)

    def power_error(n: int) -> float:
        gen = torch.Generator().manual_seed(5)
        value, hvps = power_iteration_top_eigenvalue(closure, [x], num_iterations=n, tol=0.0, generator=gen)
        assert hvps == n
        return abs(value - 1.0)

    lanczos_hvps = first_iterations_within(0.01, lanczos_error, 60)
    power_hvps = first_iterations_within(0.01, power_error, 2000)
    assert lanczos_hvps * 3 < power_hvps, (lanczos_hvps, power_hvps)
    # With their own stopping rules both reach 1%, and Lanczos stops first.
    result = lanczos(closure, [x], k=1, tol=1e-2)
    value, power_used = power_iteration_top_eigenvalue(closure, [x], tol=1e-5)
    assert abs(float(result.eigenvalues[0]) - 1.0) <= 0.01 and abs(value - 1.0) <= 0.01
    assert result.num_hvps < power_used


def test_no_global_rng_params_or_grads_touched_and_seeded() -> None:
    model, x, y = mlp_problem()
    params = list(model.parameters())
    for p in params:
        p.grad = torch.ones_like(p)
    before = [p.detach().clone() for p in params]
    rng = torch.random.get_rng_state()
    closure = lambda: F.cross_entropy(model(x), y)  # noqa: E731
    first = hessian_top_eigenvalues(closure, params, k=2, generator=torch.Generator().manual_seed(7))
    again = hessian_top_eigenvalues(closure, params, k=2, generator=torch.Generator().manual_seed(7))
    hessian_trace(closure, params, 8)
    power_iteration_top_eigenvalue(closure, params, num_iterations=5)
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert torch.equal(first, again)
    for p, b in zip(params, before, strict=True):
        assert torch.equal(p, b)
        assert torch.equal(p.grad, torch.ones_like(p))


def test_float32_basis_and_float32_model() -> None:
    model, x, y = mlp_problem()
    model.float()
    x = x.float()
    expected = torch.linalg.eigvalsh(
        exact_hessian(model.double(), lambda out: F.cross_entropy(out, y), x.double())
    ).flip(0)[:3]
    model.float()
    closure = lambda: F.cross_entropy(model(x), y)  # noqa: E731
    result = lanczos(closure, list(model.parameters()), k=3, tol=1e-5, basis_dtype=torch.float32)
    torch.testing.assert_close(result.eigenvalues, expected, rtol=1e-4, atol=0.0)


def test_invalid_arguments() -> None:
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    closure = lambda: (x**2).sum()  # noqa: E731
    with pytest.raises(ValueError, match="k must be"):
        hessian_top_eigenvalues(closure, [x], k=6)
    with pytest.raises(ValueError, match="num_iterations"):
        lanczos(closure, [x], k=3, num_iterations=2)
    with pytest.raises(ValueError, match="empty"):
        hessian_top_eigenvalues(closure, [], k=1)
    with pytest.raises(ValueError, match="require grad"):
        hessian_top_eigenvalues(closure, [torch.randn(3)], k=1)
    with pytest.raises(ValueError, match="scalar"):
        hessian_top_eigenvalues(lambda: x**2, [x], k=1)
    with pytest.raises(ValueError, match="num_samples"):
        hessian_trace(closure, [x], 0)
    # A loss linear in the parameters has H = 0.
    assert torch.equal(
        hessian_top_eigenvalues(lambda: x.sum(), [x], k=2), torch.zeros(2, dtype=torch.float64)
    )
