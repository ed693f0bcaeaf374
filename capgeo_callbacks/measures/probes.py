"""Held-out accuracy of a linear probe on hidden states (docs/design.md, "Measures").

Closed-form ridge regression to one-hot targets, fit on one set of hidden states and scored on
another: deterministic (no optimiser, no RNG) and fast.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["distinct_split", "held_out_probe_accuracy", "linear_probe_accuracy"]

DISTINCT_DIGITS = 4  # rows equal to 4 significant digits (relative to their norm) count as one input


def _check_set(x: Tensor, y: Tensor, name: str) -> None:
    if not isinstance(x, Tensor) or x.dim() != 2:
        raise ValueError(f"{name}_x must be a 2-D tensor (N x D), got shape {tuple(getattr(x, 'shape', ()))}")
    if not isinstance(y, Tensor) or y.dim() != 1:
        raise ValueError(f"{name}_y must be a 1-D tensor (N,), got shape {tuple(getattr(y, 'shape', ()))}")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{name}_x has {x.shape[0]} rows but {name}_y has {y.shape[0]} labels")
    if x.shape[0] == 0:
        raise ValueError(f"the {name} set is empty")
    if y.dtype.is_floating_point or y.dtype.is_complex or y.dtype == torch.bool:
        raise ValueError(f"{name}_y must hold integer class labels, got dtype {y.dtype}")
    if not _all_finite(x):
        raise ValueError(f"{name}_x contains non-finite values")


def _all_finite(x: Tensor) -> bool:
    """Whether every entry is finite: one pass of ``aminmax`` (NaN propagates), where ``isfinite().all()`` takes
    three and allocates."""
    if x.numel() == 0 or x.is_complex():
        return bool(torch.isfinite(x).all())
    low, high = torch.aminmax(x)
    return math.isfinite(float(low)) and math.isfinite(float(high))


def linear_probe_accuracy(
    train_x: Tensor,
    train_y: Tensor,
    test_x: Tensor,
    test_y: Tensor,
    *,
    ridge: float = 1e-3,
    num_classes: int | None = None,
) -> float:
    """Held-out accuracy of a ridge-regression probe from features to class labels.

    Features are standardised with the training mean and standard deviation (constant features are
    left centred), X_s = (X - mu_train) / sd_train. With one-hot targets Y (N x K) the probe is

        W = argmin_W (1/N) ||X_s W + 1 b^T - Y||^2 + ridge * ||W||_F^2,

    with an unpenalised bias column: since the training features are centred, b = mean(Y) and
    W = (X_s^T X_s / N + ridge I)^{-1} X_s^T (Y - mean(Y)) / N (solved in float64 in its primal D x D
    or dual N x N form, whichever is smaller; a pseudo-inverse when ``ridge == 0``). Prediction is
    argmax_k of the scores; the result is the fraction of test rows predicted correctly.

    Only the classes seen in training get a column (the others would score exactly 0 everywhere,
    below the best class, whose scores sum to 1 across classes): labels may be sparse token ids.

    Pure tensor function: needs no gradients; deterministic.

    Args:
        train_x: training features, N_train x D.
        train_y: integer labels, N_train.
        test_x: held-out features, N_test x D.
        test_y: integer labels, N_test.
        ridge: the L2 penalty (on standardised features), >= 0.
        num_classes: if given, every label must lie in [0, num_classes).

    Raises:
        ValueError: empty sets, mismatched shapes or feature dimensions, non-integer or
            out-of-range labels, non-finite features or a negative ``ridge``.
    """
    _check_set(train_x, train_y, "train")
    _check_set(test_x, test_y, "test")
    if train_x.shape[1] != test_x.shape[1]:
        raise ValueError(
            f"train_x and test_x have different feature dimensions: {train_x.shape[1]} vs {test_x.shape[1]}"
        )
    if ridge < 0:
        raise ValueError(f"ridge must be non-negative, got {ridge}")
    low = min(int(train_y.min()), int(test_y.min()))
    high = max(int(train_y.max()), int(test_y.max()))
    if low < 0:
        raise ValueError("labels must be non-negative class indices")
    if num_classes is not None and high >= num_classes:
        raise ValueError(f"labels go up to {high}, beyond num_classes={num_classes}")

    device = train_x.device
    x = train_x.to(torch.float64, copy=True)  # a copy of its own: standardised in place
    mean = x.mean(dim=0, keepdim=True)
    std = x.std(dim=0, unbiased=False, keepdim=True)
    std = torch.where(std > 0, std, torch.ones_like(std))
    x.sub_(mean).div_(std)
    classes, train_index = torch.unique(train_y.to(device), return_inverse=True)
    targets = torch.nn.functional.one_hot(train_index, classes.numel()).to(torch.float64)
    bias = targets.mean(dim=0)
    centred = targets - bias
    n, dim = x.shape
    if ridge == 0:
        weight = torch.linalg.pinv(x) @ centred
    elif dim <= n:
        gram = x.T @ x / n + ridge * torch.eye(dim, dtype=torch.float64, device=device)
        weight = torch.linalg.solve(gram, x.T @ centred / n)
    else:
        gram = x @ x.T / n + ridge * torch.eye(n, dtype=torch.float64, device=device)
        weight = x.T @ torch.linalg.solve(gram, centred / n)

    test = test_x.to(device=device, dtype=torch.float64, copy=True).sub_(mean).div_(std)
    scores = test @ weight + bias
    predicted = classes[scores.argmax(dim=1)]
    return float((predicted == test_y.to(device)).double().mean())


def _splitmix64(index: int) -> int:
    """A fixed pseudo-random signed 64-bit integer for ``index`` (SplitMix64's output function): the weights that
    turn a row of integer keys into one number. Weights in arithmetic progression would not do: rows whose keys
    have equal weighted sums would share a number."""
    z = (index + 1) * 0x9E3779B97F4A7C15 % 2**64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 % 2**64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB % 2**64
    z ^= z >> 31
    return z - 2**64 if z >= 2**63 else z


def distinct_split(rows: Tensor) -> Tensor:
    """Which rows (N x D, in a fixed order) the probe is fit on: about the first half, with no row of the rest equal
    to one of them. Rows equal to ``DISTINCT_DIGITS`` significant digits relative to their norm (a validation set
    that repeats an input, or a model blind to what tells two inputs apart) form one group, and whole groups, in
    the order they first appear, fill the fitting half; without repeats it is exactly the first half. A probe fit
    and scored on the same inputs reads them back instead of what the representation holds (docs/design.md,
    "Probes").

    Returns:
        (N,) booleans, true for the rows to fit on; the first half when one group holds (nearly) every row.
    """
    n = rows.shape[0]
    if n < 2:
        return torch.ones(n, dtype=torch.bool)
    x = rows.detach().to(device="cpu", dtype=torch.float64)
    keys = torch.round(x / x.norm(dim=1, keepdim=True).clamp_min(1e-30) * 10**DISTINCT_DIGITS)
    # one integer per row, summed exactly (integer sums do not depend on their order, float ones do): equal rows give
    # equal numbers, so grouping on it never splits an input across the halves (two different rows sharing a number,
    # which pseudo-random 64-bit weights make vanishingly rare, would only join their groups); a sort of N numbers
    # instead of N rows
    weights = torch.tensor([_splitmix64(j) for j in range(x.shape[1])], dtype=torch.long)
    _, group = torch.unique((keys.long() * weights).sum(dim=1), return_inverse=True)
    groups = int(group.max()) + 1
    first = torch.full((groups,), n, dtype=torch.long).scatter_reduce(0, group, torch.arange(n), reduce="amin")
    ranked = torch.argsort(first)  # the groups in the order they first appear
    filled = torch.cumsum(torch.bincount(group, minlength=groups)[ranked], dim=0)
    fit = torch.isin(group, ranked[: int(torch.searchsorted(filled, n // 2)) + 1])
    if bool(fit.all()) or not bool(fit.any()):
        fit = torch.arange(n) < n // 2
    return fit


def held_out_probe_accuracy(rows: Tensor, labels: Tensor, *, ridge: float = 1e-3) -> float:
    """:func:`linear_probe_accuracy` fit on the first half of ``rows`` (N x D, in a fixed order) and scored on the
    rest, the two halves sharing no input (:func:`distinct_split`): the probe the monitors report."""
    fit = distinct_split(rows).to(rows.device)
    return linear_probe_accuracy(rows[fit], labels[fit], rows[~fit], labels[~fit], ridge=ridge)
