"""RankMe and effective rank of an embedding matrix.

Two spectral-entropy ranks of a matrix Z (N x D) with singular values s_1..s_K, K = min(N, D):

- RankMe (Garrido et al., 2023): p_k = s_k / sum_j s_j + eps, RankMe = exp(-sum_k p_k log p_k).
- Effective rank (Roy and Vetterli, 2007): the same with eps = 0, p_k log p_k = 0 when p_k = 0.

Z is not centred (RankMe does not centre). Everything is computed in float64. The singular values
come from the Gram matrix of the smaller side (K x K, eigvalsh), which is faster than an SVD for every
shape benchmarked; since the Gram matrix squares the condition number, an a-posteriori bound on the
error this causes in the entropy is checked, and when it is not negligible (Z low-rank to nearly
float64 precision, or a condition number beyond about 1e6) the singular values are recomputed by a
float64 SVD of the tall orientation. Noisy collapsed hidden states (a few dominant directions over a
float32 noise floor) stay on the Gram route. Either way the result agrees with a float64 SVD to well
under 1e-6 relative.

The pure functions here have no Lightning dependency; `RankMeMonitor` calls them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "effective_rank",
    "effective_rank_from_singular_values",
    "rankme",
    "rankme_from_singular_values",
]

_DEFAULT_EPS = 1e-7
# Largest tolerated bound on the absolute entropy error of the Gram route (= relative error of the
# rank); above it the SVD route is used. On geometric spectra and noisy rank-k matrices up to
# 8192 x 1024 the actual error is 2x (exactly low-rank Z) to 1e5x below the bound; the worst seen on
# the Gram route over a sweep of noise levels was 7e-10, against the 1e-6 that capgeo promises.
_GRAM_ENTROPY_TOL = 1e-7
_F64_EPS = torch.finfo(torch.float64).eps
# |log2 max|z|| beyond which Z is rescaled before forming G = Z^T Z (float64 overflows near 2^1024).
_SAFE_EXPONENT = 400


def rankme(z: Tensor, eps: float = _DEFAULT_EPS) -> float:
    """RankMe of an embedding matrix (Garrido et al., 2023).

    p_k = s_k / sum_j s_j + eps and RankMe = exp(-sum_k p_k log p_k) over the K = min(N, D) singular
    values of Z. The eps keeps the log finite for zero singular values (and is what the RankMe paper
    uses); it shifts the value by O(K * eps * log(1 / eps)), so RankMe lies in [1, K] only up to that:
    exp(-eps (1 + eps)) <= RankMe <= K ** (1 + K * eps). Z is not centred.

    Args:
        z: the N x D matrix (rows are samples), any real dtype and device; computed in float64.
        eps: the smoothing constant added to each p_k; 0 gives the effective rank.

    Returns:
        RankMe as a Python float.

    Raises:
        TypeError: if ``z`` is not a real-valued tensor.
        ValueError: if ``z`` is not 2-D, is empty, contains NaN/Inf, or is all zeros; or if ``eps``
            is negative or not finite.

    Example::

        >>> z = torch.eye(4)
        >>> round(rankme(z), 4)
        4.0
    """
    eps = _check_eps(eps)
    s = _singular_values(z, eps)[0]
    return _spectral_entropy_rank(s, eps)


def effective_rank(z: Tensor) -> float:
    """Effective rank of a matrix (Roy and Vetterli, 2007).

    erank = exp(H(p)) with p_k = s_k / sum_j s_j and H(p) = -sum_k p_k log p_k (0 log 0 = 0). Unlike
    `rankme` there is no eps, so the bounds 1 <= erank <= min(N, D) hold exactly and zero singular
    values contribute nothing; RankMe with eps = 1e-7 is slightly larger on (near) low-rank matrices.

    Args:
        z: the N x D matrix, any real dtype and device; computed in float64, not centred.

    Returns:
        The effective rank as a Python float.

    Raises:
        TypeError: if ``z`` is not a real-valued tensor.
        ValueError: if ``z`` is not 2-D, is empty, contains NaN/Inf, or is all zeros.
    """
    s = _singular_values(z, 0.0)[0]
    return _spectral_entropy_rank(s, 0.0)


def rankme_from_singular_values(s: Tensor | Sequence[float], eps: float = _DEFAULT_EPS) -> float:
    """RankMe from precomputed singular values: exp(-sum_k p_k log p_k), p_k = s_k / sum(s) + eps.

    For measures that already have a spectrum (e.g. from a Gram matrix of per-example gradients).

    Args:
        s: the singular values, 1-D, non-negative, finite (order does not matter).
        eps: the smoothing constant added to each p_k (>= 0).

    Raises:
        ValueError: if ``s`` is not 1-D, is empty, has a negative or NaN/Inf entry, or sums to zero.
    """
    return _spectral_entropy_rank(_check_singular_values(s), _check_eps(eps))


def effective_rank_from_singular_values(s: Tensor | Sequence[float]) -> float:
    """Effective rank from precomputed singular values: exp(-sum_k p_k log p_k), p_k = s_k / sum(s).

    Args:
        s: the singular values, 1-D, non-negative, finite (order does not matter).

    Raises:
        ValueError: if ``s`` is not 1-D, is empty, has a negative or NaN/Inf entry, or sums to zero.
    """
    return _spectral_entropy_rank(_check_singular_values(s), 0.0)


def _spectral_entropy_rank(s: Tensor, eps: float) -> float:
    """exp of the entropy of p = s / sum(s) + eps, with 0 log 0 = 0 (s float64, non-negative)."""
    p = s / s.sum() + eps
    return math.exp(-float(torch.special.xlogy(p, p).sum()))


def _singular_values(z: Tensor, eps: float) -> tuple[Tensor, str]:
    """The K = min(N, D) singular values of Z in float64, and the route used ("gram" or "svd").

    Gram route: G = Z Z^T (N < D) or Z^T Z, s = sqrt(clamp(eigvalsh(G), min=0)). Its eigenvalues carry
    an absolute error of about c * eps64 * lambda_max: LAPACK's own approximate bound for eigvalsh is
    eps * ||G|| (c = 1), rounding in forming G adds about sqrt(max(N, D)) * eps in the typical case, and
    the measured total is c <= 5 for shapes up to 8192 x 1024; c = 8 + sqrt(max(N, D)) / 8 is assumed.
    For small s_k that is an error of up to sqrt(c * eps) * s_max in s_k: the condition number is
    squared. If the resulting bound on the entropy error exceeds `_GRAM_ENTROPY_TOL` (exactly or nearly
    low-rank Z), fall back to svdvals.
    Z with entries beyond 2^+-400 is first scaled by a power of two (exact; the ranks are scale
    invariant) so that G cannot overflow or underflow.
    """
    z64 = _check_matrix(z)
    n, d = z64.shape
    lam = torch.linalg.eigvalsh(_gram(z64.mT if n < d else z64)).clamp(min=0.0)
    s = lam.sqrt()
    delta_lam = (8 + math.sqrt(max(n, d)) / 8) * _F64_EPS * float(lam.max())
    if _gram_entropy_error_bound(s, delta_lam, eps) <= _GRAM_ENTROPY_TOL:
        return s, "gram"
    # svdvals is much faster on the tall orientation (measured 7x at 1024 x 8192).
    return torch.linalg.svdvals(z64 if n >= d else z64.mT), "svd"


# Gram matrices with K >= 2 * _GRAM_BLOCK are formed block by block, computing only the blocks on and
# right of the diagonal (G is symmetric). Measured on one thread against one matrix product, interleaved:
# `rankme` takes 4% less time at 2048 x 128, 17% at 2048 x 512, 31% at 8192 x 1024.
_GRAM_BLOCK = 64
_GRAM_MAX_BLOCKS = 8


def _gram(tall: Tensor) -> Tensor:
    """G = Z^T Z (K x K) of a tall Z (N x K).

    From K = 128 on, G is formed by block rows: block row j is Z_j^T [Z_j, Z_j+1, ...] for the column
    blocks Z_j of Z, and the blocks below the diagonal are mirror images of those above: (b + 1) / 2b
    of the flops of one product for b blocks (up to 8), which pays for the extra calls.
    """
    k = tall.shape[1]
    blocks = min(_GRAM_MAX_BLOCKS, k // _GRAM_BLOCK)
    if blocks < 2:
        return tall.mT @ tall
    edges = [round(i * k / blocks) for i in range(blocks + 1)]
    gram = torch.empty(k, k, dtype=tall.dtype, device=tall.device)
    for start, stop in itertools.pairwise(edges):
        block = tall[:, start:stop].mT @ tall[:, start:]  # rows start:stop of G, columns start:
        gram[start:stop, start:] = block
        gram[stop:, start:stop] = block[:, stop - start :].mT
    return gram


def _gram_entropy_error_bound(s: Tensor, delta_lam: float, eps: float) -> float:
    """Bound on |H(s) - H(s_true)| when each eigenvalue s_k^2 may be off by up to delta_lam.

    |ds_k| <= min(sqrt(delta_lam), delta_lam / s_k); with S = sum(s) and p_k = s_k / S,
    |dp_k| <= ds_k / S + p_k * sum(ds) / S; each entropy term phi(x) = -(x + eps) log(x + eps) then
    moves by at most its change to either end of [p_k - dp_k, p_k + dp_k].

    In numpy on the host: K values, about fifteen elementwise steps, each a few microseconds as a torch call and
    under one in numpy (the bound only chooses the route; the value is computed in torch either way).
    """
    s64 = s.detach().cpu().numpy()
    with np.errstate(divide="ignore"):
        ds = np.minimum(math.sqrt(delta_lam), delta_lam / s64)  # s_k = 0 -> sqrt
    total = s64.sum()
    p = s64 / total
    dp = ds / total + p * (ds.sum() / total)

    def phi(x: np.ndarray) -> np.ndarray:
        x = x + eps
        return -x * np.log(x, out=np.zeros_like(x), where=x > 0)  # 0 log 0 = 0

    base = phi(p)
    up = np.abs(phi(p + dp) - base)
    down = np.abs(phi(np.maximum(p - dp, 0.0)) - base)
    return float(np.maximum(up, down).sum())


def _check_matrix(z: Tensor) -> Tensor:
    """Validate Z and return it as float64 (scaled by a power of two if its range could overflow G)."""
    if not isinstance(z, Tensor):
        raise TypeError(f"expected a torch.Tensor of shape (N, D), got {type(z).__name__}")
    if z.is_complex():
        raise TypeError(f"expected a real-valued tensor, got dtype {z.dtype}")
    if z.ndim != 2:
        raise ValueError(f"expected a 2-D (N x D) matrix, got shape {tuple(z.shape)}")
    if z.numel() == 0:
        raise ValueError(f"expected a non-empty matrix, got shape {tuple(z.shape)}")
    z64 = z.detach().to(torch.float64)
    low, high = torch.aminmax(z64)  # one pass; NaN propagates
    max_abs = max(abs(float(low)), abs(float(high)))
    if not math.isfinite(max_abs):
        raise ValueError("Z contains NaN/Inf; skip this measurement")
    if max_abs == 0.0:
        raise ValueError("Z is all zeros, so its singular values are all zero and the rank is undefined; "
                         "skip this measurement")
    exponent = math.frexp(max_abs)[1]
    if abs(exponent) > _SAFE_EXPONENT:  # exact rescale (the ranks are scale invariant)
        z64 = torch.ldexp(z64, torch.tensor(-exponent, dtype=torch.float64, device=z64.device))
    return z64


def _check_singular_values(s: Tensor | Sequence[float]) -> Tensor:
    """Validate a spectrum and return it as a float64 tensor."""
    s64 = (s.detach() if isinstance(s, Tensor) else torch.as_tensor(s)).to(torch.float64)
    if s64.ndim != 1 or s64.numel() == 0:
        raise ValueError(f"expected a non-empty 1-D tensor of singular values, got shape {tuple(s64.shape)}")
    if not bool(torch.isfinite(s64).all()):
        raise ValueError("singular values contain NaN/Inf; skip this measurement")
    if bool((s64 < 0).any()):
        raise ValueError(f"singular values must be >= 0, got min {float(s64.min())}")
    if float(s64.sum()) == 0.0:
        raise ValueError("singular values are all zero, so the rank is undefined; skip this measurement")
    return s64


def _check_eps(eps: float) -> float:
    eps = float(eps)
    if not (math.isfinite(eps) and eps >= 0.0):
        raise ValueError(f"eps must be a finite number >= 0 (RankMe uses 1e-7), got {eps}")
    return eps
