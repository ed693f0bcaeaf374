"""Loss-Hessian spectrum from Hessian-vector products (docs/design.md, "Measures").

Everything here sees the Hessian H = d^2 L / d theta^2 of ``loss_closure()`` only through
Hessian-vector products (HVPs) by double backward: the gradient graph is built once per call
(``torch.autograd.grad(..., create_graph=True)``) and each HVP is one more backward through it, so
the memory cost is about two backward passes, never a P x P matrix.

- :func:`lanczos` / :func:`hessian_top_eigenvalues`: the k largest (algebraic) eigenvalues by Lanczos
  with full reorthogonalisation;
- :func:`hutchinson_trace` / :func:`hessian_trace`: tr(H) by Hutchinson's estimator;
- :func:`power_iteration_top_eigenvalue`: the baseline Lanczos is benchmarked against.

Randomness comes only from an explicit ``torch.Generator`` (a fresh one seeded with 0 when none is
given), never from the global RNG. The closure should evaluate the model in eval mode (no dropout) on
a fixed batch; attention is forced onto PyTorch's math SDPA backend while the closure runs, since the
fused kernels have no double backward.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "LanczosResult",
    "TraceEstimate",
    "hessian_top_eigenvalues",
    "hessian_trace",
    "hutchinson_trace",
    "lanczos",
    "power_iteration_top_eigenvalue",
]

LossClosure = Callable[[], Tensor]
"""``loss_closure() -> scalar loss`` on a fixed batch, differentiable w.r.t. ``params``."""


@dataclass(frozen=True)
class LanczosResult:
    """Output of :func:`lanczos`.

    Attributes:
        eigenvalues: the k largest Ritz values, descending, float64, on the parameters' device.
        residuals: Ritz residual norms ||H y - theta y|| of those pairs (each bounds the error of its
            eigenvalue), float64.
        num_hvps: Hessian-vector products used (= Lanczos iterations).
        converged: every residual is at most ``tol * max|theta|``.
    """

    eigenvalues: Tensor
    residuals: Tensor
    num_hvps: int
    converged: bool


@dataclass(frozen=True)
class TraceEstimate:
    """Output of :func:`hutchinson_trace`: the estimate, its standard error (sample std of the
    probes' v^T H v over sqrt(num_samples)) and the number of HVPs used."""

    trace: float
    std_error: float
    num_hvps: int


@contextlib.contextmanager
def math_sdpa() -> Iterator[None]:
    """Restrict ``F.scaled_dot_product_attention`` to the math backend (double-backward safe)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # pragma: no cover - torch without torch.nn.attention
        yield
        return
    with sdpa_kernel([SDPBackend.MATH]):
        yield


def _default_generator(generator: torch.Generator | None) -> torch.Generator:
    return torch.Generator().manual_seed(0) if generator is None else generator


class _HessianVectorProduct:
    """v -> H v on a flat float64 vector, with the gradient graph built once and reused."""

    def __init__(
        self, loss_closure: LossClosure, params: Iterable[Tensor], force_math_attention: bool
    ) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError(
                "params is empty: pass the tensors to differentiate, e.g. list(model.parameters())"
            )
        bad = [i for i, p in enumerate(self.params) if not p.requires_grad]
        if bad:
            raise ValueError(f"params at positions {bad} do not require grad")
        self.numels = [p.numel() for p in self.params]
        self.dim = sum(self.numels)
        self.device = self.params[0].device
        self.num_hvps = 0
        context = math_sdpa() if force_math_attention else contextlib.nullcontext()
        with torch.enable_grad(), context:
            loss = loss_closure()
            if not isinstance(loss, Tensor) or loss.numel() != 1:
                raise ValueError(
                    f"loss_closure must return a scalar tensor, got shape {tuple(getattr(loss, 'shape', ()))}"
                )
            grads = torch.autograd.grad(loss.reshape(()), self.params, create_graph=True, allow_unused=True)
        self.loss = float(loss.detach())
        # Gradients that are constant (or absent) contribute nothing to H v.
        self.active = [i for i, g in enumerate(grads) if g is not None and g.requires_grad]
        self.grads = [grads[i] for i in self.active]

    def __call__(self, vector: Tensor) -> Tensor:
        self.num_hvps += 1
        if not self.active:
            return torch.zeros(self.dim, dtype=torch.float64, device=self.device)
        pieces = vector.split(self.numels)
        grad_outputs = [
            pieces[i].reshape(p.shape).to(device=p.device, dtype=p.dtype)
            for i, p in ((i, self.params[i]) for i in self.active)
        ]
        with torch.enable_grad():
            hv = torch.autograd.grad(
                self.grads, self.params, grad_outputs=grad_outputs, retain_graph=True, allow_unused=True
            )
        return torch.cat(
            [
                (
                    torch.zeros(n, dtype=torch.float64, device=self.device)
                    if h is None
                    else h.reshape(-1).to(device=self.device, dtype=torch.float64)
                )
                for h, n in zip(hv, self.numels, strict=True)
            ]
        )


def _random_vector(dim: int, generator: torch.Generator, device: torch.device, rademacher: bool) -> Tensor:
    if rademacher:
        bits = torch.randint(0, 2, (dim,), generator=generator, device=generator.device)
        v = bits.to(torch.float64) * 2 - 1
    else:
        v = torch.randn(dim, generator=generator, device=generator.device, dtype=torch.float64)
    return v.to(device)


def _orthogonalise(w: Tensor, basis: Tensor) -> Tensor:
    """Remove from ``w`` (float64) its components along the rows of ``basis``, twice (full
    reorthogonalisation; the second pass fixes the rounding of the first)."""
    for _ in range(2):
        coefficients = (basis @ w.to(basis.dtype)).to(torch.float64)
        w = w - (coefficients.to(basis.dtype) @ basis).to(torch.float64)
    return w


def default_lanczos_iterations(k: int, dim: int) -> int:
    """The default Krylov subspace limit: min(P, max(4k + 40, 60)).

    Early stopping usually ends well before it on a trained network (outlying top eigenvalues); an
    untrained transformer, whose top eigenvalues crowd together, needs about 50 HVPs for 1e-6.
    """
    return min(dim, max(4 * k + 40, 60))


# Above this many bytes a float64 Lanczos basis is stored in float32 instead.
_FLOAT64_BASIS_LIMIT_BYTES = 2 << 30


def lanczos(
    loss_closure: LossClosure,
    params: Iterable[Tensor],
    k: int = 3,
    *,
    num_iterations: int | None = None,
    tol: float = 1e-6,
    generator: torch.Generator | None = None,
    force_math_attention: bool = True,
    basis_dtype: torch.dtype | None = None,
) -> LanczosResult:
    """The k largest algebraic eigenvalues of the loss Hessian by Lanczos, with diagnostics.

    Lanczos builds an orthonormal basis Q_m of the Krylov space span{q, Hq, ..., H^{m-1} q} from a
    random Gaussian start q, with T_m = Q_m^T H Q_m tridiagonal (alpha_j = q_j^T H q_j on the
    diagonal, beta_j = ||r_j|| off it). Every new vector is reorthogonalised against the whole basis
    (twice), so no spurious copies of converged eigenvalues appear. The Ritz values (eigenvalues of
    T_m) approximate the extreme eigenvalues of H; Ritz pair i has residual |beta_m * s_{m,i}|, which
    bounds |theta_i - lambda|. Iteration stops when the k largest have residual at most
    ``tol * max|theta|`` or after ``num_iterations`` HVPs. If the Krylov space becomes invariant
    before that, it restarts from a new random vector orthogonal to the basis.

    "Largest" is algebraic (the most positive), not by magnitude: at a saddle the negative
    eigenvalues are not returned. A single-vector Lanczos sees one copy of an exactly repeated
    eigenvalue unless it breaks down and restarts; a trained network's top eigenvalues are distinct.

    Needs gradients (double backward): call it outside ``torch.inference_mode``. The basis Q_m is an
    m x P matrix (m <= ``num_iterations``); the recurrence runs in float64.

    Args:
        loss_closure: returns the scalar loss on a fixed batch; called once.
        params: the tensors (requiring grad) the Hessian is taken with respect to.
        k: number of eigenvalues, 1 <= k <= P.
        num_iterations: maximum Krylov dimension m (HVPs); default
            :func:`default_lanczos_iterations` = min(P, max(4k + 40, 60)).
        tol: relative residual tolerance for early stopping (0 runs all ``num_iterations``).
        generator: source of the start vector; default a fresh generator seeded with 0.
        force_math_attention: run the closure under the math SDPA backend (fused attention kernels
            have no double backward).
        basis_dtype: storage dtype of Q_m; default float64 while m x P x 8 bytes stays under 2 GiB,
            float32 beyond (orthogonality to ~1e-7, ample for eigenvalues to 1e-4).

    Raises:
        ValueError: bad ``k``/``num_iterations``/``tol``, empty ``params``, params that do not
            require grad, or a non-scalar loss.
    """
    hvp = _HessianVectorProduct(loss_closure, params, force_math_attention)
    dim = hvp.dim
    if not 1 <= k <= dim:
        raise ValueError(f"k must be in [1, P={dim}], got {k}")
    m_max = default_lanczos_iterations(k, dim) if num_iterations is None else min(num_iterations, dim)
    if m_max < k:
        raise ValueError(f"num_iterations ({num_iterations}) must be at least k ({k})")
    if tol < 0:
        raise ValueError(f"tol must be non-negative, got {tol}")
    generator = _default_generator(generator)
    device = hvp.device

    if basis_dtype is None:
        too_big = m_max * dim * 8 > _FLOAT64_BASIS_LIMIT_BYTES
        basis_dtype = torch.float32 if too_big else torch.float64
    basis = torch.zeros(m_max, dim, dtype=basis_dtype, device=device)
    alphas: list[float] = []
    betas: list[float] = []  # betas[j] couples q_j and q_{j+1}
    q = _random_vector(dim, generator, device, rademacher=False)
    basis[0] = q / q.norm()
    theta = torch.zeros(0, dtype=torch.float64)
    residuals = torch.zeros(0, dtype=torch.float64)
    converged = False
    for j in range(m_max):
        q_j = basis[j].to(torch.float64)
        w = hvp(q_j)
        alpha = float(q_j @ w)
        w = w - alpha * q_j
        if j > 0:
            w = w - betas[j - 1] * basis[j - 1].to(torch.float64)
        w = _orthogonalise(w, basis[: j + 1])
        alphas.append(alpha)
        beta = float(w.norm())

        tridiagonal = torch.diag(torch.tensor(alphas, dtype=torch.float64))
        if j > 0:
            off = torch.tensor(betas[:j], dtype=torch.float64)
            tridiagonal += torch.diag(off, 1) + torch.diag(off, -1)
        theta, vectors = torch.linalg.eigh(tridiagonal)  # ascending
        top = min(k, j + 1)
        residuals = (beta * vectors[-1, -top:]).abs().flip(0)
        scale = float(theta.abs().max()) if theta.numel() else 0.0
        limit = tol * max(scale, torch.finfo(torch.float64).tiny)
        if tol > 0 and j + 1 >= k and bool((residuals <= limit).all()):
            converged = True
            break
        if j + 1 == m_max:
            break
        if beta <= 1e-10 * max(scale, 1e-300):
            # Invariant subspace: restart from a random direction orthogonal to the basis.
            beta = 0.0
            w = _orthogonalise(_random_vector(dim, generator, device, rademacher=False), basis[: j + 1])
            basis[j + 1] = w / w.norm()
        else:
            basis[j + 1] = w / beta
        betas.append(beta)

    top_values = theta.flip(0)[:k].to(device)
    return LanczosResult(
        eigenvalues=top_values,
        residuals=residuals[:k].to(device),
        num_hvps=hvp.num_hvps,
        converged=converged,
    )


def hessian_top_eigenvalues(
    loss_closure: LossClosure,
    params: Iterable[Tensor],
    k: int = 3,
    *,
    num_iterations: int | None = None,
    tol: float = 1e-6,
    generator: torch.Generator | None = None,
    force_math_attention: bool = True,
    basis_dtype: torch.dtype | None = None,
) -> Tensor:
    """The k largest algebraic eigenvalues of the loss Hessian, descending, float64 (shape (k,)).

    Lanczos with full reorthogonalisation on Hessian-vector products by double backward; see
    :func:`lanczos` (which also reports the HVP count, residuals and convergence) for the method and
    the arguments. Warns when the residual tolerance was not reached within ``num_iterations``.

    Needs gradients (double backward): call it outside ``torch.inference_mode``, with the model in
    eval mode.
    """
    result = lanczos(
        loss_closure,
        params,
        k,
        num_iterations=num_iterations,
        tol=tol,
        generator=generator,
        force_math_attention=force_math_attention,
        basis_dtype=basis_dtype,
    )
    if not result.converged and tol > 0:
        warnings.warn(
            "hessian_top_eigenvalues: Lanczos did not reach the residual tolerance within num_iterations; "
            "the eigenvalues may be inaccurate (raise num_iterations)",
            RuntimeWarning,
            stacklevel=2,
        )
    return result.eigenvalues


def hutchinson_trace(
    loss_closure: LossClosure,
    params: Iterable[Tensor],
    num_samples: int = 64,
    *,
    generator: torch.Generator | None = None,
    force_math_attention: bool = True,
) -> TraceEstimate:
    """Hutchinson's estimate of tr(H) with its standard error.

    tr(H) = E[v^T H v] for Rademacher v (entries +-1 with probability 1/2); the estimate is the mean
    over ``num_samples`` probes, with variance 2 (||H||_F^2 - sum_i H_ii^2) / num_samples.

    Needs gradients (double backward): call it outside ``torch.inference_mode``.

    Raises:
        ValueError: ``num_samples < 1`` or the errors of :func:`lanczos`.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be at least 1, got {num_samples}")
    hvp = _HessianVectorProduct(loss_closure, params, force_math_attention)
    generator = _default_generator(generator)
    samples = torch.empty(num_samples, dtype=torch.float64)
    for i in range(num_samples):
        v = _random_vector(hvp.dim, generator, hvp.device, rademacher=True)
        samples[i] = float(v @ hvp(v))
    std_error = float(samples.std() / math.sqrt(num_samples)) if num_samples > 1 else math.nan
    return TraceEstimate(trace=float(samples.mean()), std_error=std_error, num_hvps=hvp.num_hvps)


def hessian_trace(
    loss_closure: LossClosure,
    params: Iterable[Tensor],
    num_samples: int = 64,
    *,
    generator: torch.Generator | None = None,
    force_math_attention: bool = True,
) -> float:
    """tr(H) by Hutchinson's estimator: mean of v^T H v over ``num_samples`` Rademacher probes.

    See :func:`hutchinson_trace`, which also returns the standard error. Needs gradients (double
    backward): call it outside ``torch.inference_mode``.
    """
    return hutchinson_trace(
        loss_closure, params, num_samples, generator=generator, force_math_attention=force_math_attention
    ).trace


def power_iteration_top_eigenvalue(
    loss_closure: LossClosure,
    params: Iterable[Tensor],
    *,
    num_iterations: int = 1000,
    tol: float = 1e-6,
    generator: torch.Generator | None = None,
    force_math_attention: bool = True,
) -> tuple[float, int]:
    """The dominant Hessian eigenvalue by power iteration, and the number of HVPs used.

    v <- H v / ||H v|| from a random Gaussian start; the estimate is the Rayleigh quotient
    v^T H v. Stops when it changes by at most ``tol`` relative between iterations, or after
    ``num_iterations`` HVPs (``tol=0`` runs them all). Converges at rate |lambda_2 / lambda_1| per
    HVP (Lanczos converges much faster for a small gap), and to the eigenvalue largest in magnitude,
    which may be negative.

    Needs gradients (double backward): call it outside ``torch.inference_mode``.

    Raises:
        ValueError: ``num_iterations < 1`` or the errors of :func:`lanczos`.
    """
    if num_iterations < 1:
        raise ValueError(f"num_iterations must be at least 1, got {num_iterations}")
    hvp = _HessianVectorProduct(loss_closure, params, force_math_attention)
    generator = _default_generator(generator)
    v = _random_vector(hvp.dim, generator, hvp.device, rademacher=False)
    v = v / v.norm()
    estimate = math.nan
    for _ in range(num_iterations):
        hv = hvp(v)
        previous, estimate = estimate, float(v @ hv)
        norm = float(hv.norm())
        if norm == 0.0:
            break
        v = hv / norm
        if tol > 0 and abs(estimate - previous) <= tol * abs(estimate):
            break
    return estimate, hvp.num_hvps
