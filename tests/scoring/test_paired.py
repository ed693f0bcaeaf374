"""The paired, stratified bootstrap of a metric's difference: each metric against scikit-learn's, resamples that keep
every stratum's size, the AUROC within strata counted by hand, and a difference whose sign is known."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

from capgeo_callbacks.scoring.paired import metric, paired_difference, resample_weights

RNG = np.random.default_rng(3)
Y = RNG.integers(0, 2, 60).astype(float)
P = np.clip(0.5 + 0.3 * (Y - 0.5) + RNG.normal(0, 0.2, 60), 0.01, 0.99)
STRATA = ["a"] * 20 + ["b"] * 25 + ["c"] * 15


def test_each_metric_on_every_run_once_is_scikit_learns() -> None:
    assert metric("log_loss", Y, P)[0] == pytest.approx(log_loss(Y, P))
    assert metric("brier", Y, P)[0] == pytest.approx(brier_score_loss(Y, P))
    assert metric("auroc", Y, P)[0] == pytest.approx(roc_auc_score(Y, P))
    assert metric("mean", Y, P)[0] == pytest.approx(P.mean())


def test_the_auroc_within_strata_counts_only_pairs_of_one_stratum() -> None:
    score = np.round(P, 1)  # ties count half
    right = pairs = 0.0
    for i in range(60):
        for j in range(60):
            if Y[i] == 1 and Y[j] == 0 and STRATA[i] == STRATA[j]:
                pairs += 1
                right += 1.0 if score[i] > score[j] else 0.5 if score[i] == score[j] else 0.0
    assert metric("auroc", Y, score, strata=STRATA)[0] == pytest.approx(right / pairs)


def test_resamples_keep_each_stratums_size_and_repeat_with_the_seed() -> None:
    weights = resample_weights(STRATA, resamples=200, seed=1)
    assert weights.shape == (200, 60)
    for label, size in (("a", 20), ("b", 25), ("c", 15)):
        members = [i for i, s in enumerate(STRATA) if s == label]
        assert np.all(weights[:, members].sum(axis=1) == size)
    assert np.array_equal(weights, resample_weights(STRATA, resamples=200, seed=1))
    assert not np.array_equal(weights, resample_weights(STRATA, resamples=200, seed=2))
    with pytest.raises(ValueError, match="read-only"):  # made once and shared: no caller can change another's draws
        weights[0, 0] = 5
    weighted = metric("log_loss", Y, P, weights)
    assert weighted[0] == pytest.approx(log_loss(Y, P, sample_weight=weights[0]))


def test_a_better_second_score_gives_a_positive_log_loss_difference() -> None:
    worse = np.full(60, 0.5)
    found = paired_difference(Y, worse, P, "log_loss", STRATA, resamples=2000)
    assert found.value == pytest.approx(log_loss(Y, worse) - log_loss(Y, P))
    assert 0 < found.low < found.value < found.high and found.n == 60 and found.resamples == 2000
    auroc = paired_difference(Y, P, worse, "auroc", STRATA, resamples=2000)
    assert auroc.low > 0 and auroc.second == pytest.approx(0.5)


def test_identical_scores_tie_and_bad_input_is_refused() -> None:
    tie = paired_difference(Y, P, P, "brier", STRATA, resamples=100)
    assert tie.value == tie.low == tie.high == 0.0
    assert paired_difference([], [], [], "log_loss").value is None
    with pytest.raises(ValueError, match="unknown metric"):
        paired_difference(Y, P, P, "accuracy")
    with pytest.raises(ValueError, match="a stratum per run"):
        paired_difference(Y, P, P[:-1], "brier")


def test_a_score_that_is_not_a_number_is_refused_not_averaged() -> None:
    with_nan = P.copy()
    with_nan[[3, 7]] = np.nan
    for name in ("log_loss", "brier", "auroc", "mean"):
        with pytest.raises(ValueError, match="2 values that are not finite"):
            paired_difference(Y, P, with_nan, name, STRATA, resamples=100)
    with pytest.raises(ValueError, match="outcomes holds 1 value that is not finite"):
        paired_difference([*Y[:-1], np.nan], P, P, "brier", resamples=100)


def test_no_resample_with_a_figure_is_a_clear_error_not_an_empty_quantile() -> None:
    with pytest.raises(ValueError, match="resamples must be at least 1"):
        paired_difference(Y, P, P[::-1], "brier", STRATA, resamples=0)
    # one acquirer and one not in one stratum: the single resample (seed 3) draws the second run twice, no pair left
    with pytest.raises(ValueError, match="none of the 1 resamples gives a figure for the auroc"):
        paired_difference([1.0, 0.0], [0.9, 0.1], [0.4, 0.6], "auroc", ["a", "a"], resamples=1, seed=3)
    assert paired_difference([1.0, 0.0], [0.9, 0.1], [0.4, 0.6], "auroc", ["a", "a"], resamples=1, seed=0).value == 1.0
