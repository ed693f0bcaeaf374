"""ILDR against Gaussian classes of known centroids and spread, a float64 numpy reference from the definition, its
invariances and its undefined cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from capgeo_callbacks.measures.ildr import ildr


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def reference_ildr(rows: torch.Tensor, targets: torch.Tensor) -> float:
    """ILDR in numpy, class by class, in the pairwise form of the source: sum over pairs of classes of
    n_c n_c' ||mu_c - mu_c'||^2 / (2 N) over the squared distances of the rows to their centroids."""
    z, y = rows.double().numpy(), targets.numpy()
    groups = [z[y == c] for c in np.unique(y) if (y == c).sum() >= 2]
    n = sum(len(g) for g in groups)
    means = [g.mean(axis=0) for g in groups]
    between = sum(len(a) * len(b) * ((ma - mb) ** 2).sum() for a, ma in zip(groups, means, strict=True)
                  for b, mb in zip(groups, means, strict=True)) / (2 * n)
    within = sum(((g - m) ** 2).sum() for g, m in zip(groups, means, strict=True))
    return float(between / within)


def gaussian_classes(sizes: list[int], centroids: torch.Tensor, sigma: float, seed: int = 0
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """``sizes[c]`` rows around ``centroids[c]`` with isotropic noise of standard deviation ``sigma``, shuffled."""
    targets = torch.cat([torch.full((n,), c) for c, n in enumerate(sizes)])
    rows = centroids[targets] + sigma * torch.randn(len(targets), centroids.shape[1], generator=generator(seed),
                                                    dtype=torch.float64)
    order = torch.randperm(len(targets), generator=generator(seed + 1))
    return rows[order], targets[order]


def test_gaussian_classes_give_the_analytic_ratio_within_their_sampling_error() -> None:
    sizes, sigma, dim = [1500, 2000, 2500, 3000], 1.5, 8
    centroids = torch.zeros(4, dim, dtype=torch.float64)
    centroids[1, 0], centroids[2, 1], centroids[3, :2] = 6.0, 6.0, 6.0
    rows, targets = gaussian_classes(sizes, centroids, sigma)
    n, c = sum(sizes), len(sizes)
    weights = torch.tensor(sizes, dtype=torch.float64)
    grand = (weights[:, None] * centroids).sum(dim=0) / n
    spread = float((weights * (centroids - grand).square().sum(dim=1)).sum())  # sum_c n_c ||m_c - m||^2
    noise = sigma**2 * dim  # E ||z - m_c||^2
    analytic = spread / (n * noise)  # the population's ratio
    # the sample's expectation: each centroid estimated from its rows adds noise / n_c to its spread (C - 1 in all),
    # and each row's distance to its own estimated centroid loses noise / n_c (C in all)
    expected = (spread + (c - 1) * noise) / ((n - c) * noise)
    # first-order standard errors: the between part moves with the centroids' errors (variance 4 sigma^2 spread,
    # plus the chi-square of their noise), the within part is a chi-square with (N - C) D degrees of freedom
    sd_between = math.sqrt(4 * sigma**2 * spread + 2 * (c - 1) * sigma**4 * dim)
    sd_within = sigma**2 * math.sqrt(2 * (n - c) * dim)
    relative = math.hypot(sd_between / (spread + (c - 1) * noise), sd_within / ((n - c) * noise))
    assert 0.3 < analytic < 3 and abs(expected - analytic) < 1e-3 * analytic  # far from the floor (C-1)/(N-C)
    value = ildr(rows, targets)
    assert abs(value - expected) <= 4 * relative * expected, (value, expected, relative)
    assert value == pytest.approx(reference_ildr(rows, targets), rel=1e-12)


def test_separated_classes_rise_and_a_single_row_per_class_does_not_count() -> None:
    centroids = torch.eye(3, dtype=torch.float64) * 4
    near, _ = gaussian_classes([200] * 3, centroids * 0.1, 1.0)
    far, targets = gaussian_classes([200] * 3, centroids * 2, 1.0)
    assert ildr(far, targets) > 10 * ildr(near, targets)
    # classes of one row change nothing, wherever they sit
    extra = torch.randn(5, 3, generator=generator(7), dtype=torch.float64) * 100
    joined = torch.cat([far, extra]), torch.cat([targets, torch.arange(10, 15)])
    assert ildr(*joined) == pytest.approx(ildr(far, targets), rel=1e-12)
    assert ildr(*joined) == pytest.approx(reference_ildr(*joined), rel=1e-12)


def test_scaling_translating_permuting_and_relabelling_leave_it_unchanged() -> None:
    rows, targets = gaussian_classes([30, 50, 20], torch.randn(3, 16, generator=generator(3), dtype=torch.float64), 0.7)
    value = ildr(rows, targets)
    assert ildr(rows * 1e3, targets) == pytest.approx(value, rel=1e-12)
    assert ildr(rows * 1e-3, targets) == pytest.approx(value, rel=1e-12)
    assert ildr(rows + 1e4, targets) == pytest.approx(value, rel=1e-9)
    order = torch.randperm(len(targets), generator=generator(4))
    assert ildr(rows[order], targets[order]) == pytest.approx(value, rel=1e-12)
    assert ildr(rows, 100 - 7 * targets) == pytest.approx(value, rel=1e-12)  # other names, negative ones too
    assert ildr(rows.float(), targets.int()) == pytest.approx(value, rel=1e-5)  # any real and integer dtypes


@pytest.mark.parametrize("case", ["one class", "every class a single row", "one class and single rows", "no rows",
                                  "NaN", "Inf", "no spread within classes"])
def test_undefined_cases_give_nan(case: str) -> None:
    rows = torch.randn(6, 4, generator=generator(5), dtype=torch.float64)
    targets = torch.tensor([0, 0, 0, 1, 1, 1])
    if case == "one class":
        targets = torch.zeros(6, dtype=torch.long)
    elif case == "every class a single row":
        targets = torch.arange(6)
    elif case == "one class and single rows":
        targets = torch.tensor([0, 0, 0, 1, 2, 3])
    elif case == "no rows":
        rows, targets = rows[:0], targets[:0]
    elif case == "NaN":
        rows[2, 1] = math.nan
    elif case == "Inf":
        rows[4, 0] = math.inf
    else:
        rows = torch.tensor([[1.0, 2.0]] * 3 + [[0.1, 0.3]] * 3, dtype=torch.float32)
    assert math.isnan(ildr(rows, targets))


def test_bad_arguments_raise() -> None:
    rows, targets = torch.randn(4, 3), torch.tensor([0, 0, 1, 1])
    with pytest.raises(ValueError, match="2-D"):
        ildr(rows[0], targets)
    with pytest.raises(ValueError, match="integer"):
        ildr(rows, targets.float())
    with pytest.raises(ValueError, match="4 rows but targets has 3"):
        ildr(rows, targets[:3])
