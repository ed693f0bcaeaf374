"""Linear probes: a linearly encoded label is recovered, a shuffled one is at chance."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from capgeo_callbacks.measures.probes import DISTINCT_DIGITS, distinct_split, linear_probe_accuracy


def encoded_states(num: int, dim: int, classes: int, noise: float, seed: int) -> tuple[Tensor, Tensor]:
    """Hidden states = class mean (random direction) + a large nuisance offset + Gaussian noise."""
    gen = torch.Generator().manual_seed(seed)
    means = 3.0 * torch.randn(classes, dim, generator=gen)
    labels = torch.randint(0, classes, (num,), generator=gen)
    scales = torch.logspace(-2, 2, dim)  # badly scaled features: standardisation matters
    states = (means[labels] + noise * torch.randn(num, dim, generator=gen)) * scales + 50.0
    return states, labels


def test_linearly_encoded_labels_are_recovered() -> None:
    x, y = encoded_states(2000, 32, classes=5, noise=1.0, seed=0)
    accuracy = linear_probe_accuracy(x[:1000], y[:1000], x[1000:], y[1000:])
    assert accuracy > 0.97
    # Deterministic, and invariant to rescaling each feature (train statistics standardise it).
    assert linear_probe_accuracy(x[:1000], y[:1000], x[1000:], y[1000:]) == accuracy
    scale = torch.linspace(0.1, 10.0, 32)
    assert linear_probe_accuracy(x[:1000] * scale, y[:1000], x[1000:] * scale, y[1000:]) == pytest.approx(
        accuracy, abs=2e-3
    )


def test_shuffled_labels_give_chance_accuracy() -> None:
    # Labels independent of the states: predictions are independent of the test labels, so the
    # number correct is Binomial(n_test, 1/K) for uniform labels. n_test = 4000, K = 4:
    # sd = sqrt(0.25 * 0.75 / 4000) = 0.0068; 4 sd = 0.027 (two-sided miss rate 6e-5).
    classes, n_test = 4, 4000
    x, y = encoded_states(8000, 32, classes=classes, noise=1.0, seed=1)
    shuffled = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(2))]
    accuracy = linear_probe_accuracy(
        x[:4000], shuffled[:4000], x[4000:], shuffled[4000:], num_classes=classes
    )
    chance = 1.0 / classes
    assert abs(accuracy - chance) <= 4 * math.sqrt(chance * (1 - chance) / n_test)


def test_dual_form_and_sparse_token_labels() -> None:
    # More features than training rows (dual N x N solve), labels that are sparse token ids.
    x, y = encoded_states(300, 400, classes=3, noise=0.5, seed=3)
    tokens = torch.tensor([7, 42, 1000])[y]
    accuracy = linear_probe_accuracy(x[:150], tokens[:150], x[150:], tokens[150:], ridge=1e-2)
    assert accuracy > 0.95
    # Dual and primal forms are the same estimator.
    small_x, small_y = encoded_states(200, 20, classes=3, noise=2.0, seed=4)
    primal = linear_probe_accuracy(small_x[:100], small_y[:100], small_x[100:], small_y[100:], ridge=0.1)
    padded = torch.cat([small_x, torch.zeros(200, 100)], dim=1)  # constant features add nothing
    dual = linear_probe_accuracy(padded[:100], small_y[:100], padded[100:], small_y[100:], ridge=0.1)
    assert primal == dual
    # ridge = 0 (pseudo-inverse) works.
    assert linear_probe_accuracy(small_x[:100], small_y[:100], small_x[100:], small_y[100:], ridge=0.0) > 0.5


def test_classes_unseen_in_training_count_as_errors() -> None:
    x = torch.tensor([[0.0], [1.0], [0.1], [0.9]])
    y = torch.tensor([0, 1, 0, 1])
    assert linear_probe_accuracy(x, y, x, torch.tensor([0, 1, 2, 2])) == 0.5


def test_invalid_inputs_raise() -> None:
    x, y = torch.randn(10, 4), torch.randint(0, 3, (10,))
    cases = [
        (x[:0], y[:0], x, y),  # empty train set
        (x, y, x[:0], y[:0]),  # empty test set
        (x, y[:5], x, y),  # row/label count mismatch
        (x, y, x[:, :3], y),  # feature dimension mismatch
        (x[0], y, x, y),  # 1-D features
        (x, y.float(), x, y),  # float labels
        (x, y - 5, x, y),  # negative labels
        (torch.full((10, 4), math.nan), y, x, y),  # non-finite features
    ]
    for train_x, train_y, test_x, test_y in cases:
        with pytest.raises(ValueError):
            linear_probe_accuracy(train_x, train_y, test_x, test_y)
    with pytest.raises(ValueError, match="num_classes"):
        linear_probe_accuracy(x, y, x, y, num_classes=2)
    with pytest.raises(ValueError, match="ridge"):
        linear_probe_accuracy(x, y, x, y, ridge=-1.0)


def _split_by_whole_rows(rows: torch.Tensor) -> torch.Tensor:
    """distinct_split's definition, written directly: group equal rounded rows (unique over whole rows), fill the
    fitting half with whole groups in the order they first appear."""
    n = rows.shape[0]
    x = rows.double()
    keys = torch.round(x / x.norm(dim=1, keepdim=True).clamp_min(1e-30) * 10**DISTINCT_DIGITS)
    groups: dict[tuple, list[int]] = {}
    for index, key in enumerate(map(tuple, keys.tolist())):
        groups.setdefault(key, []).append(index)
    fit, taken = torch.zeros(n, dtype=torch.bool), 0
    for members in groups.values():  # insertion order: the order groups first appear
        fit[members] = True
        taken += len(members)
        if taken >= n // 2:
            break
    if bool(fit.all()) or not bool(fit.any()):
        fit = torch.arange(n) < n // 2
    return fit


def test_distinct_split_matches_its_definition_and_never_shares_an_input() -> None:
    generator = torch.Generator().manual_seed(0)
    for _ in range(100):
        base = torch.randn(int(torch.randint(2, 200, (1,), generator=generator)),
                           int(torch.randint(1, 64, (1,), generator=generator)), generator=generator)
        rows = base[torch.randint(0, base.shape[0], (int(torch.randint(2, 500, (1,), generator=generator)),),
                                  generator=generator)]
        fit = distinct_split(rows)
        assert torch.equal(fit, _split_by_whole_rows(rows))
        if rows.shape[1] >= 4 and len(torch.unique(rows, dim=0)) > 1:  # rows of 1-3 features may round alike
            shared = {tuple(r) for r in rows[fit].tolist()} & {tuple(r) for r in rows[~fit].tolist()}
            assert not shared
    distinct = torch.randn(64, 8, generator=generator)
    assert torch.equal(distinct_split(distinct), torch.arange(64) < 32)
