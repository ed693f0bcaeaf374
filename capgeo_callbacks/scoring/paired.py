r"""Is one probability better than another on the same runs? A paired, stratified bootstrap of their difference
==========================================================================================================

Two scores of the same runs (two models' probabilities of acquisition, two rules' leads) are compared on the same
runs, so their difference is paired: each resample draws runs, and both scores of a drawn run come with it. The
difference of a metric (:data:`METRICS`) of ``first`` minus that of ``second`` is given with a 95% percentile
interval from a seeded numpy bootstrap (``numpy.random.default_rng(seed)``, :data:`RESAMPLES` resamples), each
resample drawing runs with replacement **within each stratum** (e.g. a cell of runs that share every setting), so
every resample keeps each stratum's size. ``scipy.stats.bootstrap`` has no strata, hence numpy.

Metrics, each on weights (how many times each run was drawn) so that every resample is one matrix product:

- ``log_loss``: the mean of ``-(y log p + (1 - y) log(1 - p))``, ``p`` clipped to ``[EPS, 1 - EPS]`` (nats a run);
- ``brier``: the mean of ``(p - y) ** 2``;
- ``auroc``: the share of (positive, negative) pairs **of the same stratum** that the score orders right (ties
  count half): with strata, how well the score tells runs apart that no setting tells apart; without, the AUROC;
- ``mean``: the mean of the score itself (the outcomes unused), e.g. a lead per run.

Lower is better for ``log_loss`` and ``brier``: ``paired_difference(y, base, other, "log_loss")`` above 0 means
``other`` is better. A resample without a pair of the same stratum gives no AUROC and is left out (``resamples``
says how many gave a figure).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["EPS", "METRICS", "RESAMPLES", "Difference", "metric", "paired_difference", "resample_weights"]

METRICS = ("log_loss", "brier", "auroc", "mean")
RESAMPLES = 9999
EPS = 1e-6  # probabilities are clipped to [EPS, 1 - EPS]: one sure and wrong run costs at most 13.8 nats


@dataclass(frozen=True)
class Difference:
    """``metric`` of ``first`` minus that of ``second`` on ``n`` runs, with its bootstrap 95% interval (None: no
    runs, or no figure); ``first`` and ``second`` are the two metrics on all the runs."""

    metric: str
    n: int
    first: float | None = None
    second: float | None = None
    value: float | None = None
    low: float | None = None
    high: float | None = None
    resamples: int = 0

    def __str__(self) -> str:
        if self.value is None:
            return f"- (n={self.n})"
        return f"{self.value:+.3f} [{self.low:+.3f}, {self.high:+.3f}] (n={self.n})"


def resample_weights(strata: Sequence[object], resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """How many times each run is drawn in each resample (``resamples`` x runs): within each stratum, as many
    draws with replacement as the stratum has runs. Read-only: the same strata, count and seed give the same draws,
    made once (a page compares many scores on the same runs)."""
    return _resample_weights(tuple(str(stratum) for stratum in strata), resamples, seed)


@functools.lru_cache(maxsize=8)
def _resample_weights(strata: tuple[str, ...], resamples: int, seed: int) -> np.ndarray:
    labels = np.array(strata)
    rng = np.random.default_rng(seed)
    weights = np.zeros((resamples, len(labels)))
    for label in dict.fromkeys(labels):  # in the order first seen: the same draws for the same runs
        members = np.flatnonzero(labels == label)
        weights[:, members] = rng.multinomial(len(members), np.full(len(members), 1.0 / len(members)), resamples)
    weights.flags.writeable = False
    return weights


def _pairs(outcomes: np.ndarray, score: np.ndarray, strata: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each (positive i, negative j): 1 if i scores above j, 0.5 on a tie, 0 below, in ``ordered``; 1 where
    both are of the same stratum, in ``same``."""
    positive, negative = outcomes == 1, outcomes == 0
    above = np.sign(score[positive][:, None] - score[negative][None, :])
    same = (strata[positive][:, None] == strata[negative][None, :]).astype(float)
    return (above + 1.0) / 2.0 * same, same


def metric(name: str, outcomes: Sequence[float], score: Sequence[float], weights: np.ndarray | None = None,
           strata: Sequence[object] | None = None) -> np.ndarray:
    """``name`` (:data:`METRICS`) of ``score`` against ``outcomes`` (1: acquired, 0: not) under each row of
    ``weights`` (none: every run once); NaN where a weighting gives no figure."""
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; choose one of {', '.join(METRICS)}")
    y, s = np.asarray(outcomes, dtype=float), np.asarray(score, dtype=float)
    w = np.ones((1, len(y))) if weights is None else np.atleast_2d(weights)
    if name == "auroc":
        labels = np.array([""] * len(y) if strata is None else [str(stratum) for stratum in strata])
        ordered, same = _pairs(y, s, labels)
        w_pos, w_neg = w[:, y == 1], w[:, y == 0]
        with np.errstate(invalid="ignore", divide="ignore"):
            return ((w_pos @ ordered) * w_neg).sum(axis=1) / ((w_pos @ same) * w_neg).sum(axis=1)
    if name == "mean":
        per_run = s
    elif name == "brier":
        per_run = (s - y) ** 2
    else:
        p = np.clip(s, EPS, 1.0 - EPS)
        per_run = -(y * np.log(p) + (1.0 - y) * np.log(1.0 - p))
    return (w @ per_run) / w.sum(axis=1)


def paired_difference(outcomes: Sequence[float], first: Sequence[float], second: Sequence[float], name: str,
                      strata: Sequence[object] | None = None, resamples: int = RESAMPLES, seed: int = 0,
                      level: float = 0.95) -> Difference:
    """``name`` of ``first`` minus that of ``second`` on the same runs, with its paired bootstrap interval,
    resampling runs within ``strata`` (module docstring).

    Raises:
        ValueError: on an unknown metric, scores of other lengths than the outcomes, a score or outcome that is not
            a finite number (NaN: a run without a score must be left out before, not averaged in), fewer than one
            resample, or resamples none of which gives a figure.
    """
    if not len(first) == len(second) == len(outcomes) or (strata is not None and len(strata) != len(outcomes)):
        raise ValueError(f"one outcome, two scores and a stratum per run: got {len(outcomes)} outcomes, "
                         f"{len(first)} and {len(second)} scores, {None if strata is None else len(strata)} strata")
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; choose one of {', '.join(METRICS)}")
    for label, values in (("outcomes", outcomes), ("first", first), ("second", second)):
        bad = int(np.sum(~np.isfinite(np.asarray(values, dtype=float))))
        if bad:
            raise ValueError(f"{label} holds {bad} value{'s' if bad > 1 else ''} that {'are' if bad > 1 else 'is'} "
                             "not finite (NaN or infinite): leave the runs without a score out first")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1 for an interval, got {resamples}")
    n = len(outcomes)
    if not n:
        return Difference(name, 0)
    both = metric(name, outcomes, first, strata=strata)[0], metric(name, outcomes, second, strata=strata)[0]
    value = both[0] - both[1]
    if np.isnan(value):
        return Difference(name, n, *(None if np.isnan(v) else float(v) for v in both))
    weights = resample_weights(strata if strata is not None else [0] * n, resamples, seed)
    drawn = metric(name, outcomes, first, weights, strata) - metric(name, outcomes, second, weights, strata)
    drawn = drawn[np.isfinite(drawn)]
    if not len(drawn):
        raise ValueError(f"none of the {resamples} resamples gives a figure for the {name} difference (each lost "
                         "every pair of a positive and a negative run of one stratum): too few runs of a kind within "
                         "the strata")
    low, high = np.quantile(drawn, [(1 - level) / 2, (1 + level) / 2])
    return Difference(name, n, float(both[0]), float(both[1]), float(value), float(low), float(high), len(drawn))
