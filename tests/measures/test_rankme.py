"""RankMe and effective rank against an independent float64 numpy SVD reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from capgeo_callbacks.measures.rankme import (
    _singular_values,
    effective_rank,
    effective_rank_from_singular_values,
    rankme,
    rankme_from_singular_values,
)

EPS = 1e-7
REL = 1e-6  # the agreement with a float64 SVD that capgeo promises


def reference_rankme(z: torch.Tensor | np.ndarray, eps: float = EPS) -> float:
    """RankMe straight from the definition, on numpy's float64 SVD."""
    a = z.detach().double().numpy() if isinstance(z, torch.Tensor) else np.asarray(z, dtype=np.float64)
    s = np.linalg.svd(a, compute_uv=False)
    p = s / s.sum() + eps
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def closed_form(k: int, big: int, eps: float = EPS) -> float:
    """RankMe of a matrix with `k` equal nonzero singular values and `big - k` zeros."""
    h = -k * (1 / k + eps) * math.log(1 / k + eps)
    if eps > 0:
        h -= (big - k) * eps * math.log(eps)
    return math.exp(h)


def gaussian(n: int, d: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def orthonormal(n: int, k: int, seed: int) -> torch.Tensor:
    """n x k with orthonormal columns."""
    return torch.linalg.qr(gaussian(n, k, seed))[0]


@pytest.mark.parametrize("shape", [(512, 128), (128, 512), (300, 300), (1024, 256), (7, 3)])
def test_gaussian_matches_numpy(shape: tuple[int, int]) -> None:
    z = gaussian(*shape, seed=1)
    assert rankme(z) == pytest.approx(reference_rankme(z), rel=REL)
    assert effective_rank(z) == pytest.approx(reference_rankme(z, eps=0.0), rel=REL)


@pytest.mark.parametrize(
    ("shape", "k"), [((512, 256), 3), ((256, 512), 3), ((1024, 256), 20), ((200, 200), 1)]
)
def test_low_rank_product_matches_numpy_and_is_about_k(shape: tuple[int, int], k: int) -> None:
    n, d = shape
    a, b = gaussian(n, k, seed=2), gaussian(k, d, seed=3)
    z = a @ b
    value = rankme(z)
    assert value == pytest.approx(reference_rankme(z), rel=REL)
    # Tolerance: the k nonzero singular values of AB lie in [s_min(A) s_min(B), s_max(A) s_max(B)], so
    # with c = cond(A) cond(B) the largest p is <= c / (c + k - 1) and exp(H) >= 1 / p_max (min-entropy).
    # Above, H <= log k + k eps log k - (K - k) eps log eps: k equal values and K - k zeros, plus eps.
    sa, sb = np.linalg.svd(a.numpy(), compute_uv=False), np.linalg.svd(b.numpy(), compute_uv=False)
    c = (sa.max() / sa.min()) * (sb.max() / sb.min())
    big = min(n, d)
    lower = (c + k - 1) / c * (1 - 2 * k * EPS)
    upper = math.exp(math.log(k) + k * EPS * math.log(k) - (big - k) * EPS * math.log(EPS)) * (1 + 1e-9)
    assert lower <= value <= upper
    assert value == pytest.approx(k, rel=0.15)  # c is about 1.2 for these shapes


@pytest.mark.parametrize(("shape", "k"), [((400, 300), 5), ((300, 400), 1), ((64, 64), 64)])
def test_equal_spectrum_rank_k_closed_form(shape: tuple[int, int], k: int) -> None:
    n, d = shape
    z = 3.5 * orthonormal(n, k, seed=4) @ orthonormal(d, k, seed=5).T  # k singular values equal to 3.5
    assert rankme(z) == pytest.approx(closed_form(k, min(n, d)), rel=1e-9)
    assert rankme(z) == pytest.approx(reference_rankme(z), rel=REL)
    assert effective_rank(z) == pytest.approx(k, rel=1e-9)


@pytest.mark.parametrize(("n", "d"), [(128, 512), (256, 256), (512, 128)])
def test_isotropic_gives_min_n_d(n: int, d: int) -> None:
    k = min(n, d)
    z = orthonormal(max(n, d), k, seed=6)  # orthonormal columns; transpose for orthonormal rows
    z = z.T if n < d else z
    assert rankme(z) == pytest.approx(reference_rankme(z), rel=REL)
    assert rankme(z) == pytest.approx(closed_form(k, k), rel=1e-9)
    assert rankme(z) == pytest.approx(k, rel=k * EPS * math.log(k))  # eps shifts it by O(K eps log K)
    assert effective_rank(z) == pytest.approx(k, rel=1e-9)


def test_rank_one_is_about_one() -> None:
    z = gaussian(300, 1, seed=7) @ gaussian(1, 200, seed=8)
    assert rankme(z) == pytest.approx(closed_form(1, 200), rel=1e-9)
    assert rankme(z) == pytest.approx(1.0, abs=200 * EPS * -math.log(EPS))
    assert effective_rank(z) == pytest.approx(1.0, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 48),
    d=st.integers(1, 48),
    rank=st.integers(1, 48),
    log_scale=st.floats(-40, 40),
    seed=st.integers(0, 2**16),
)
def test_bounds_and_reference_property(n: int, d: int, rank: int, log_scale: float, seed: int) -> None:
    k = min(n, d)
    rank = min(rank, k)
    z = gaussian(n, rank, seed) @ gaussian(rank, d, seed + 1) * 10.0**log_scale
    value = rankme(z)
    # The eps term moves the bounds [1, K] by O(eps): exp(-eps (1 + eps)) <= RankMe <= K ** (1 + K eps).
    assert math.exp(-EPS * (1 + EPS)) * (1 - 1e-12) <= value <= k ** (1 + k * EPS) * (1 + 1e-12)
    assert value == pytest.approx(reference_rankme(z), rel=REL)
    erank = effective_rank(z)
    assert 1 - 1e-12 <= erank <= k * (1 + 1e-12)
    assert erank == pytest.approx(reference_rankme(z, eps=0.0), rel=REL)


def test_float32_input_gives_the_float64_result() -> None:
    z32 = gaussian(256, 64, seed=9, dtype=torch.float32)
    assert rankme(z32) == rankme(z32.double())
    low = (gaussian(256, 2, seed=10) @ gaussian(2, 64, seed=11)).float()
    assert rankme(low) == rankme(low.double())


@pytest.mark.parametrize("scale", [2.0**-700, 2.0**-20, 1e-30, 3.7, 1e30, 2.0**700])
def test_scale_invariance(scale: float) -> None:
    for z in (gaussian(200, 50, seed=12), gaussian(200, 3, seed=13) @ gaussian(3, 50, seed=14)):
        assert rankme(z * scale) == pytest.approx(rankme(z), rel=1e-12)
        assert effective_rank(z * scale) == pytest.approx(effective_rank(z), rel=1e-12)


def test_power_of_two_scaling_is_exact() -> None:
    z = gaussian(200, 50, seed=15)
    assert rankme(z * 2.0**-600) == rankme(z) == rankme(z * 2.0**10)


@pytest.mark.parametrize("shape", [(300, 40), (40, 300), (100, 100)])
def test_transpose_invariance(shape: tuple[int, int]) -> None:
    for z in (gaussian(*shape, seed=16), gaussian(shape[0], 4, seed=17) @ gaussian(4, shape[1], seed=18)):
        assert rankme(z.T) == pytest.approx(rankme(z), rel=1e-12)


def test_not_centred() -> None:
    z = gaussian(400, 100, seed=19)
    # a large common offset is one dominant direction: centring would remove it, RankMe must not
    assert rankme(z + 100.0) < rankme(z) / 2
    assert rankme(z + 100.0) == pytest.approx(reference_rankme(z + 100.0), rel=REL)


def test_both_routes_are_used_and_agree_with_svd() -> None:
    well = gaussian(512, 128, seed=20)
    low = gaussian(512, 3, seed=21) @ gaussian(3, 128, seed=22)
    for z, route in ((well, "gram"), (well.T, "gram"), (low, "svd"), (low.T, "svd")):
        s, used = _singular_values(z, EPS)
        assert used == route
        reference = np.linalg.svd(z.numpy(), compute_uv=False)
        expected = rankme_from_singular_values(reference)
        assert rankme_from_singular_values(s) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("shape", [(512, 128), (128, 512), (1024, 64)])
def test_noisy_low_rank_and_ill_conditioned_sweep(shape: tuple[int, int]) -> None:
    # The Gram route squares the condition number: across the transition from exactly low-rank (SVD
    # route) to well conditioned (Gram route), both routes must agree with the SVD reference.
    n, d = shape
    routes = set()
    for i, noise in enumerate([0.0, 1e-14, 1e-12, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2, 1e-1]):
        for dtype in (torch.float64, torch.float32):
            signal = gaussian(n, 3, seed=30 + i) @ gaussian(3, d, seed=50 + i)
            z = (signal + noise * gaussian(n, d, seed=70 + i)).to(dtype)
            routes.add(_singular_values(z, EPS)[1])
            assert rankme(z) == pytest.approx(reference_rankme(z), rel=REL)
            assert effective_rank(z) == pytest.approx(reference_rankme(z, eps=0.0), rel=REL)
    k = min(n, d)
    u, v = orthonormal(n, k, seed=90), orthonormal(d, k, seed=91)
    for condition in (1e2, 1e4, 1e6, 1e8, 1e12):
        z = (u * torch.logspace(0, -math.log10(condition), k, dtype=torch.float64)) @ v.T
        routes.add(_singular_values(z, EPS)[1])
        assert rankme(z) == pytest.approx(reference_rankme(z), rel=REL)
    assert routes == {"gram", "svd"}


def test_eps_difference_between_rankme_and_effective_rank() -> None:
    z = gaussian(300, 2, seed=23) @ gaussian(2, 200, seed=24)
    s = np.linalg.svd(z.numpy(), compute_uv=False)
    assert rankme(z, eps=0.0) == pytest.approx(effective_rank(z), rel=1e-12)
    # the 198 zero singular values each add -eps log eps to the entropy of RankMe, none to erank
    assert rankme(z) / effective_rank(z) == pytest.approx(math.exp(-198 * EPS * math.log(EPS)), rel=1e-6)
    assert effective_rank_from_singular_values(s) == pytest.approx(effective_rank(z), rel=1e-9)


def test_from_singular_values_helpers() -> None:
    s = [4.0, 0.0, 1.0, 2.0]
    p = np.array(s) / 7.0
    nz = p[p > 0]
    assert effective_rank_from_singular_values(s) == pytest.approx(math.exp(-(nz * np.log(nz)).sum()))
    q = p + 0.01
    expected = math.exp(-(q * np.log(q)).sum())
    assert rankme_from_singular_values(torch.tensor(s), eps=0.01) == pytest.approx(expected)
    assert rankme_from_singular_values(s[::-1]) == pytest.approx(rankme_from_singular_values(s), rel=1e-15)
    for bad in ([], [[1.0, 2.0]], [1.0, -1.0], [0.0, 0.0], [1.0, math.nan], [math.inf]):
        with pytest.raises(ValueError):
            rankme_from_singular_values(bad)
        with pytest.raises(ValueError):
            effective_rank_from_singular_values(bad)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_inf_raise_skip_message(bad: float) -> None:
    z = gaussian(20, 10, seed=25, dtype=torch.float32)
    z[3, 4] = bad
    with pytest.raises(ValueError, match="contains NaN/Inf; skip this measurement"):
        rankme(z)
    with pytest.raises(ValueError, match="contains NaN/Inf"):
        effective_rank(z)


def test_invalid_inputs() -> None:
    with pytest.raises(ValueError, match="2-D"):
        rankme(torch.ones(3))
    with pytest.raises(ValueError, match="2-D"):
        rankme(torch.ones(2, 3, 4))
    with pytest.raises(ValueError, match="non-empty"):
        rankme(torch.ones(0, 5))
    with pytest.raises(ValueError, match="all zeros"):
        rankme(torch.zeros(4, 5))
    with pytest.raises(TypeError, match="torch.Tensor"):
        rankme(np.ones((3, 3)))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="real-valued"):
        rankme(torch.ones(3, 3, dtype=torch.complex64))
    for eps in (-1e-7, math.nan, math.inf):
        with pytest.raises(ValueError, match="eps"):
            rankme(torch.eye(3), eps=eps)


def test_accepts_grad_and_integer_tensors() -> None:
    z = gaussian(30, 8, seed=26).requires_grad_()
    assert rankme(z) == pytest.approx(reference_rankme(z), rel=REL)
    assert rankme(torch.eye(5, dtype=torch.int64)) == pytest.approx(closed_form(5, 5), rel=1e-12)
