r"""Who will learn: how well a score tells the runs that will acquire from those that will not
=============================================================================================

A warning that fires on every run that is not a shuffled-answer control has the precision of the share of runs
that acquire; precision alone cannot tell it from a warning that knows which runs will learn. This module measures
that knowing: at fixed shares of each run's budget (10%, 25%, 50%), **among the runs not yet acquired then**
(acquisition step after that point), the AUROC between the runs that acquire later within their budget
(positives) and the non-control runs that never do (negatives), of every score the runs record:

- every series, at the last evaluation at or before that point where it has a value (``acc``, ``val/loss``,
  ``val/logprob``, ``probe_acc/<layer>``, ``rankme/<layer>``, ``weight_norm/...``, ``lr``, any other tag);
- for RankMe and weight-norm series, two features of the series so far: its drop from its running maximum
  (``(max - last) / max``) and its slope (least squares over its last :data:`SLOPE_POINTS` values, per step);
- each warning rule: 1 if it has alerted by that point, else 0;
- each forecaster: its probability of acquisition where it gives one (``probability`` on its output), else minus
  its predicted step as a share of the budget ("not within reach" and no forecast rank lowest);
- a baseline, "fires on every run that learns": the same score on every run (AUROC 0.5 by construction).

A score's **direction** is fixed before it is scored, never chosen on the runs it is scored on: higher accuracy,
token accuracy, log-prob and probe accuracy, and lower loss, mean more likely to acquire; for the others
(RankMe, weight norm, the learning rate, their features, any other tag) no direction is known a priori, and the
AUROC is that of the raw value (higher = acquire), where 0.5 is chance and a value far below 0.5 separates as
well as one far above. With calibration runs (``--calibration FOLDER``) those directions are taken from the
calibration runs' own AUROC at the same share, but only where its 95% interval excludes 0.5 (a calibration AUROC
near 0.5 is a coin flip, and a direction read off it would be arbitrary); otherwise the row says "no direction"
and shows the raw AUROC. The table says which. (``directions="point"`` takes the calibration AUROC's side of 0.5
whatever its interval: how the earlier registrations fixed them.)

The AUROC is scikit-learn's ``roc_auc_score``, with a 95% percentile bootstrap interval (``scipy.stats.bootstrap``,
resampling the positives and the negatives apart, of the Mann-Whitney U over the product of the group sizes,
which is the AUROC); fewer than :data:`MIN_GROUP` runs in either group give no figure ("inconclusive"), with
the n shown. A run without the score at that point (a probe not measured yet, a series it does not record) is
left out of that score's groups. Runs that never acquired and stopped before their budget are left out too
(the summary's ``steps``, else its last evaluation, short of the budget: whether they would have acquired
is not known). Reported pooled and within each task (a run's ``group``: a
:class:`~capgeo_callbacks.scoring.ScoredRun`'s task and level; runs of another kind may group by another setting).

scikit-learn is a statistics library the live callbacks do not need: ``pip install "capgeo-callbacks[stats]"``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from capgeo_callbacks.keys import ACC, LOGPROB, PROBE_ACC, RANKME, TOKEN_ACC, TRAIN_LOSS, VAL_LOSS, WEIGHT_NORM
from capgeo_callbacks.publish.text import markdown_row
from capgeo_callbacks.rules import Rule, RunView, rule_output

__all__ = ["LEGEND", "MIN_GROUP", "SHARES", "Auroc", "auroc", "discrimination", "discrimination_table",
           "discriminations"]

SHARES = (0.1, 0.25, 0.5)
MIN_GROUP = 2  # runs in each group for a figure: with one, every resample is the same pair
SLOPE_POINTS = 5
RESAMPLES = 9999
FEATURED = (RANKME, WEIGHT_NORM)  # series whose drop from the running max and slope are scored too
# +1: a higher value means more likely to acquire; -1: a lower one. Tags ending in "/" are prefixes.
A_PRIORI = {ACC: 1, TOKEN_ACC: 1, LOGPROB: 1, PROBE_ACC: 1, VAL_LOSS: -1, TRAIN_LOSS: -1}
BASELINE = "fires on every run that learns"
DIRECTIONS = ("interval", "point")  # how calibration fixes a direction (discrimination's ``directions``)


def _sklearn() -> Any:
    try:
        from sklearn import metrics
    except ImportError:
        raise ImportError("the AUROC table needs scikit-learn: pip install \"capgeo-callbacks[stats]\"") from None
    return metrics


@dataclass(frozen=True)
class Auroc:
    """The AUROC of a score between ``positives`` and ``negatives`` runs, with its bootstrap 95% interval (None:
    fewer than :data:`MIN_GROUP` runs in a group)."""

    positives: int
    negatives: int
    value: float | None = None
    low: float | None = None
    high: float | None = None

    def __str__(self) -> str:
        n = f"({self.positives} vs {self.negatives})"
        if self.value is None:
            return f"inconclusive {n}"
        return f"{self.value:.2f} [{self.low:.2f}, {self.high:.2f}] {n}"


_PAIRS_PER_CHUNK = 2**24  # resamples' pair comparisons held at once (tens of MB of booleans)


def _u_share(positives: np.ndarray, negatives: np.ndarray, axis: int = -1) -> np.ndarray:
    """The AUROC as the Mann-Whitney U of the positives over the product of the group sizes (ties count half), along
    ``axis`` of any batch of resamples: every positive compared with every negative. The same U as
    ``scipy.stats.mannwhitneyu`` (multiples of one half, exact in float64), without ranking each resample."""
    pos, neg = np.moveaxis(positives, axis, -1), np.moveaxis(negatives, axis, -1)
    batch = np.broadcast_shapes(pos.shape[:-1], neg.shape[:-1])
    n1, n0 = pos.shape[-1], neg.shape[-1]
    pos = np.broadcast_to(pos, (*batch, n1)).reshape(-1, n1, 1)
    neg = np.broadcast_to(neg, (*batch, n0)).reshape(-1, 1, n0)
    u = np.empty(pos.shape[0])
    chunk = max(1, _PAIRS_PER_CHUNK // (n1 * n0))
    for start in range(0, len(u), chunk):
        p, n = pos[start:start + chunk], neg[start:start + chunk]
        u[start:start + chunk] = np.count_nonzero(p > n, axis=(1, 2)) + 0.5 * np.count_nonzero(p == n, axis=(1, 2))
    return (u / (n1 * n0)).reshape(batch)


def auroc(positives: Sequence[float], negatives: Sequence[float], seed: int = 0, interval: bool = True) -> Auroc:
    """The AUROC of scores (higher = positive) of ``positives`` against ``negatives`` (module docstring), with its
    interval unless ``interval`` is False; infinite scores are allowed (only their order counts)."""
    from scipy.stats import rankdata

    n1, n0 = len(positives), len(negatives)
    if n1 < MIN_GROUP or n0 < MIN_GROUP:
        return Auroc(n1, n0)
    ranks = rankdata(np.array([*positives, *negatives], dtype=float))  # the AUROC depends on the order alone
    return _auroc_of_ranks(tuple(ranks.tolist()), n1, seed, interval)


@functools.lru_cache(maxsize=4096)  # the record scores many series whose runs fall in the same order
def _auroc_of_ranks(ranks: tuple[float, ...], n1: int, seed: int, interval: bool) -> Auroc:
    """:func:`auroc` of the first ``n1`` of ``ranks`` against the rest."""
    from scipy.stats import bootstrap

    n0 = len(ranks) - n1
    order = np.array(ranks)
    value = float(_sklearn().roc_auc_score([1] * n1 + [0] * n0, order))
    if not interval or np.all(order == order[0]):
        return Auroc(n1, n0, value, value if interval else None, value if interval else None)
    found = bootstrap((order[:n1], order[n1:]), _u_share, n_resamples=RESAMPLES, vectorized=True, paired=False,
                      method="percentile", random_state=np.random.default_rng(seed)).confidence_interval
    return Auroc(n1, n0, value, float(found.low), float(found.high))


# ------------------------------------------------------------------------------------------- scores


Value = Callable[[Any, RunView], float]  # (the run, its series up to the point) -> the score, NaN if none


@dataclass(frozen=True)
class Score:
    """A score of a run at a point: its name, how it is read, and its direction (+1: higher = acquire, -1: lower
    = acquire, None: not known a priori)."""

    name: str
    value: Value
    direction: int | None
    source: str = "a priori"


def a_priori(tag: str) -> int | None:
    """The direction of a series known before any run is scored (module docstring), or None."""
    for key, sign in A_PRIORI.items():
        if tag == key or (key.endswith("/") and tag.startswith(key)):
            return sign
    return None


def _finite(view: RunView, tag: str) -> list[tuple[int, float]]:
    return [(step, value) for step, value in zip(view.steps, view.values(tag), strict=True) if math.isfinite(value)]


def _last(tag: str) -> Value:
    def value(run: Any, view: RunView) -> float:
        points = _finite(view, tag)
        return points[-1][1] if points else math.nan
    return value


def _drop(tag: str) -> Value:
    def value(run: Any, view: RunView) -> float:
        points = _finite(view, tag)
        peak = max((v for _, v in points), default=math.nan)
        return (peak - points[-1][1]) / peak if points and peak > 0 else math.nan
    return value


def _slope(tag: str) -> Value:
    def value(run: Any, view: RunView) -> float:
        from scipy.stats import linregress

        points = _finite(view, tag)[-SLOPE_POINTS:]
        if len(points) < 2:
            return math.nan
        return float(linregress([s for s, _ in points], [v for _, v in points]).slope)
    return value


def series_scores(runs: Sequence[Any]) -> list[Score]:
    """A score for every series any run records (in the order first recorded), and the drop and slope of the
    RankMe and weight-norm series."""
    tags: dict[str, None] = {}
    for run in runs:
        tags.update(dict.fromkeys(run.view.series))
    scores = []
    for tag in tags:
        scores.append(Score(tag, _last(tag), a_priori(tag)))
        if tag.startswith(FEATURED):
            scores += [Score(f"{tag}: drop from its max", _drop(tag), None),
                       Score(f"{tag}: slope", _slope(tag), None)]
    return scores


def warning_score(name: str, fired: Mapping[str, int | None]) -> Score:
    """A warning rule's score: 1 if it alerted at or before the point (its first alert ``fired[run]``), else 0."""
    def value(run: Any, view: RunView) -> float:
        step = fired.get(run.name)
        return 1.0 if step is not None and step <= view.step else 0.0
    return Score(f"warning: {name}", value, 1, "its alert")


def forecast_score(rule: Rule) -> Score:
    """A forecaster's score: its probability of acquisition where its forecast carries one, else minus its
    predicted step as a share of the run's budget (none, or "not within reach": minus infinity)."""
    def value(run: Any, view: RunView) -> float:
        output = rule_output(rule, view, [])
        if output.forecast is None:
            return -math.inf
        if output.forecast.probability is not None:  # a forecaster that gives the probability of acquisition
            return float(output.forecast.probability)
        return -float(output.forecast.predicted) / (run.view.max_steps or 1)
    return Score(f"forecast: {rule.name}", value, 1, "its forecast")


def _baseline(run: Any, view: RunView) -> float:
    return 1.0


# ------------------------------------------------------------------------------------------- groups


def point(run: Any, share: float) -> int | None:
    """The number of evaluations at or before ``share`` of the run's budget (None: no budget recorded)."""
    budget = run.view.max_steps
    if budget is None:
        return None
    return sum(1 for step in run.view.steps if step <= share * budget)


def population(runs: Sequence[Any], share: float) -> tuple[list[tuple[Any, int, bool]], dict[str, int]]:
    """The non-control runs not yet acquired at ``share`` of their budget, each with its evaluations so far and
    whether it acquires later; and how many were left out, by reason."""
    kept, left = [], {"no budget recorded": 0, "no evaluation yet": 0, "stopped before its budget": 0}
    for run in runs:
        if run.control:
            continue
        end = point(run, share)
        if end is None:
            left["no budget recorded"] += 1
            continue
        if run.acquisition is not None and run.acquisition <= share * run.view.max_steps:
            continue  # acquired already
        if end == 0:
            left["no evaluation yet"] += 1
        elif run.acquisition is None and int(run.summary.get("steps") or run.view.steps[-1]) < run.view.max_steps:
            left["stopped before its budget"] += 1
        else:
            kept.append((run, end, run.acquisition is not None))
    return kept, {reason: n for reason, n in left.items() if n}


def _cell(scored: Sequence[tuple[Any, float, bool]], direction: int | None) -> Auroc:
    sign = direction or 1
    values = [(sign * value, positive) for _, value, positive in scored if not math.isnan(value)]
    return auroc([v for v, p in values if p], [v for v, p in values if not p])


def discrimination(runs: Sequence[Any], fired: Mapping[str, Mapping[str, int | None]] | None = None,
                   forecasters: Sequence[Rule] = (), shares: Sequence[float] = SHARES,
                   calibration: Sequence[Any] | None = None, directions: str = "interval") -> dict[str, Any]:
    """The AUROC of every score at each share of the budget, pooled and within each task (module docstring).

    Args:
        runs: the runs (:class:`~capgeo_callbacks.scoring.ScoredRun`).
        fired: per warning rule, each run's first alert step (None: none), as
            :func:`~capgeo_callbacks.scoring.warning_scores` gives it.
        forecasters: forecaster rules, replayed at each point.
        shares: the shares of the budget.
        calibration: runs whose own AUROC at each share sets the direction of the scores without one a priori.
        directions: ``"interval"``: from calibration only where its AUROC's 95% interval excludes 0.5;
            ``"point"``: whichever side of 0.5 the calibration AUROC lies.

    Returns:
        per share (``"0.25"``): ``groups`` (per column, ``pooled`` then each task, the runs that acquire later and
        those that never do), ``left_out`` (by reason) and ``rows`` (per score: ``name``, ``direction``, ``source``
        and ``cells``, an :class:`Auroc` per column).
    """
    return discriminations(runs, fired, forecasters, shares, calibration, (directions,))[directions]


def discriminations(runs: Sequence[Any], fired: Mapping[str, Mapping[str, int | None]] | None = None,
                    forecasters: Sequence[Rule] = (), shares: Sequence[float] = SHARES,
                    calibration: Sequence[Any] | None = None, directions: Sequence[str] = DIRECTIONS
                    ) -> dict[str, dict[str, Any]]:
    """:func:`discrimination` under each way of fixing directions in ``directions`` (keyed by it), from one reading
    of the runs: every score's values and every calibration AUROC are computed once, and a cell on which two ways
    agree (the same score in the same direction) is computed once."""
    unknown = [way for way in directions if way not in DIRECTIONS]
    if unknown:
        raise ValueError(f"unknown directions {unknown[0]!r}; choose one of {', '.join(DIRECTIONS)}")
    scores = [Score(BASELINE, _baseline, 1, "constant"), *series_scores(runs)]
    scores += [warning_score(name, steps) for name, steps in (fired or {}).items()]
    scores += [forecast_score(rule) for rule in forecasters]
    tasks = sorted({run.group for run in runs if not run.control})
    found: dict[str, dict[str, Any]] = {way: {} for way in directions}
    for share in shares:
        kept, left = population(runs, share)
        values = {score.name: [(run, score.value(run, run.view.prefix(end)), positive) for run, end, positive in kept]
                  for score in scores}
        measured = _calibration_aurocs(scores, calibration, share, interval="interval" in directions)
        groups = {"pooled": kept, **{task: [k for k in kept if k[0].group == task] for task in tasks}}
        sizes = {c: (sum(p for *_, p in g), sum(not p for *_, p in g)) for c, g in groups.items()}
        cells: dict[tuple[str, int], dict[str, Auroc]] = {}
        for way in directions:
            chosen = {name: _direction(found_auroc, way == "point") for name, found_auroc in measured.items()}
            rows = []
            for score in scores:
                direction, source = chosen.get(score.name, (score.direction, score.source))
                key = (score.name, direction or 1)
                if key not in cells:
                    cells[key] = {column: _cell([v for v in values[score.name] if v[0].group == column
                                                 or column == "pooled"], direction) for column in groups}
                rows.append({"name": score.name, "direction": direction, "source": source, "cells": cells[key]})
            found[way][f"{share:g}"] = {"groups": sizes, "left_out": left, "rows": rows}
    return found


def _calibration_aurocs(scores: Sequence[Score], calibration: Sequence[Any] | None, share: float,
                        interval: bool = True) -> dict[str, Auroc]:
    """The calibration runs' AUROC at ``share`` of each score without a direction a priori (raw values; with its
    interval where ``interval``)."""
    if not calibration:
        return {}
    kept, _ = population(calibration, share)
    found = {}
    for score in scores:
        if score.direction is not None:
            continue
        values = [(score.value(run, run.view.prefix(end)), positive) for run, end, positive in kept]
        values = [(v, p) for v, p in values if not math.isnan(v)]
        found[score.name] = auroc([v for v, p in values if p], [v for v, p in values if not p], interval=interval)
    return found


def _direction(found_auroc: Auroc, point: bool) -> tuple[int | None, str]:
    """A direction and its source from a calibration AUROC: where its 95% interval excludes 0.5 (``point``: on
    whichever side of 0.5 it lies)."""
    value = found_auroc.value
    if value is None:
        return None, "none: calibration inconclusive"
    if point:
        return (1 if value >= 0.5 else -1), f"calibration, AUROC {value:.2f} there"
    if found_auroc.low > 0.5 or found_auroc.high < 0.5:  # type: ignore[operator]
        return (1 if value > 0.5 else -1), (f"calibration, AUROC {value:.2f} [{found_auroc.low:.2f}, "
                                            f"{found_auroc.high:.2f}] there")
    return None, (f"no direction: calibration AUROC {value:.2f} [{found_auroc.low:.2f}, {found_auroc.high:.2f}] "
                  "holds 0.5")


# ------------------------------------------------------------------------------------------- tables


def _direction_text(direction: int | None, source: str) -> str:
    if direction is None:
        return "none (raw)" + ("" if source == "a priori" else f" ({source})")
    words = "higher" if direction > 0 else "lower"
    return {"a priori": words, "constant": "-", "its alert": "alerted", "its forecast": "sooner / likelier"
            }.get(source, f"{words} ({source})")


def _decidable(groups: tuple[int, int]) -> bool:
    return min(groups) >= MIN_GROUP


def discrimination_table(found: Mapping[str, Any]) -> str:
    """Markdown: per share of the budget, a sentence with the groups' sizes and, where the pooled groups or a
    task's hold at least :data:`MIN_GROUP` runs each, a table of AUROC [95%] (positives vs negatives) per score,
    pooled and within each task that can be measured (the others named with their n)."""
    parts = []
    for share, entry in found.items():
        groups, left = entry["groups"], entry["left_out"]
        pooled = groups["pooled"]
        columns = [column for column, n in groups.items() if column == "pooled" or _decidable(n)]
        others = [f"{column} {p} vs {n}" for column, (p, n) in groups.items() if column not in columns]
        text = (f"At {float(share):.0%} of the budget, among the non-control runs not yet acquired: {pooled[0]} "
                f"acquire later, {pooled[1]} never do" + (" (left out: " + ", ".join(
                    f"{n} {reason}" for reason, n in left.items()) + ")" if left else "") + ".")
        if others:
            text += (f" Too few runs for an AUROC (fewer than {MIN_GROUP} in a group) within "
                     + ", ".join(others) + ".")
        if not any(_decidable(groups[column]) for column in columns):
            parts += [text + " No AUROC at this share.", ""]
            continue
        parts += [text, "", markdown_row(["score", "direction", *(
            f"{column} ({groups[column][0]} vs {groups[column][1]})" for column in columns)]),
            markdown_row(["---"] * (2 + len(columns)))]
        for row in entry["rows"]:
            parts.append(markdown_row([row["name"], _direction_text(row["direction"], row["source"]),
                                       *(str(row["cells"][column]) for column in columns)]))
        parts.append("")
    return "\n".join(parts).rstrip("\n")


LEGEND = ("AUROC [bootstrap 95%] (runs that acquire later vs non-control runs that never do), among the runs not "
          "yet acquired at each share of the budget; direction fixed before scoring (higher accuracy, log-prob, "
          "probe accuracy, lower loss: more likely to acquire); \"none (raw)\": no direction known a priori, the "
          "AUROC of the raw value, where 0.5 is chance and a value far below 0.5 separates as well as one far "
          "above; a warning scores 1 once it has alerted; a forecaster, its probability of acquisition, else minus "
          "its predicted step as a share of the budget.")
