"""ILDR: the inter/intra-class distance ratio of a layer's rows (arXiv 2604.20923, 2026; docs/design.md, "ILDR").

Fisher's criterion on the rows Z (N x D) and their classes y (N,): the spread of the class centroids about the
centroid of all rows over the spread of the rows about their own class's centroid,

    ILDR = sum_c n_c ||mu_c - mu||^2 / sum_i ||z_i - mu_(y_i)||^2,

mu_c the centroid of the n_c rows of class c, mu the centroid of all (counted) rows. Only classes with at least
two rows count: a class of one row has no spread of its own, and its centroid is that row. The numerator equals
half the size-weighted mean of the squared distances between pairs of centroids, sum_{c, c'} n_c n_c'
||mu_c - mu_c'||^2 / (2 N): the pairwise form of the source. No eigendecomposition: O(N D).

The pure function here has no Lightning dependency; the RankMe unit calls it (``capture/unit.py``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["ildr"]

# within-class spread at or below this share of the total counts as none (zero up to float64 rounding)
_NO_SPREAD = 1e-12


def ildr(rows: Tensor, targets: Tensor) -> float:
    """The inter/intra-class distance ratio (Fisher's criterion) of ``rows`` grouped by ``targets`` (module docstring).

    Invariant to scaling and translating the rows, to their order and to renaming the classes. NaN where it is
    undefined: fewer than two classes with two rows or more, non-finite rows, or no spread within the classes
    (every row on its class's centroid); the caller reports and skips it.

    Args:
        rows: Z, N x D, any real dtype and device; computed in float64.
        targets: y, N integer class labels.

    Returns:
        ILDR as a Python float (>= 0), or NaN.

    Raises:
        ValueError: if ``rows`` is not 2-D, ``targets`` not 1-D integers, or their lengths differ.

    Example::

        >>> z = torch.tensor([[0.0], [2.0], [10.0], [12.0]])
        >>> ildr(z, torch.tensor([0, 0, 1, 1]))  # centroids 1 and 11, 5 from the mean: 4 * 25 / (4 * 1)
        25.0
    """
    if not isinstance(rows, Tensor) or rows.dim() != 2 or rows.is_complex():
        raise ValueError(f"rows must be a real 2-D tensor (N x D), got {getattr(rows, 'shape', type(rows).__name__)}")
    if not isinstance(targets, Tensor) or targets.dim() != 1 or targets.dtype.is_floating_point \
            or targets.is_complex() or targets.dtype == torch.bool:
        raise ValueError(f"targets must be a 1-D tensor of integer classes, got {getattr(targets, 'dtype', targets)}")
    if rows.shape[0] != targets.shape[0]:
        raise ValueError(f"rows has {rows.shape[0]} rows but targets has {targets.shape[0]} labels")
    z = rows.detach().to(torch.float64)
    _, index, counts = torch.unique(targets.detach().to(z.device), return_inverse=True, return_counts=True)
    counted = counts[index] >= 2  # rows of classes with two rows or more
    if int((counts >= 2).sum()) < 2:
        return math.nan
    z, index = z[counted], index[counted]
    z = z - z.mean(dim=0)  # centred first: mu = 0 below, and no cancellation on rows far from the origin
    sizes = counts.to(torch.float64)
    centroids = torch.zeros(counts.shape[0], z.shape[1], dtype=torch.float64, device=z.device).index_add_(0, index, z)
    centroids /= sizes.clamp(min=1.0)[:, None]
    between = float((sizes * centroids.square().sum(dim=1))[counts >= 2].sum())
    within = float((z - centroids[index]).square().sum())
    if not (math.isfinite(between) and math.isfinite(within)) or within <= _NO_SPREAD * (between + within):
        return math.nan
    return between / within
