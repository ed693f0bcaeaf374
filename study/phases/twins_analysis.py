r"""Twins: the registered test's analysis (issue 44; spec section 16). Does the geometry add to what the accuracy,
the losses and the weight norm tell about which twins will acquire?

    python -m study.phases.twins fit   # the calibration twins -> study/twins_fitted.json (frozen)

Twins share every setting and differ only in their seed (:mod:`study.phases.twins`); a summary's ``cell`` names its
setting, ``grok-...`` cells are the grokking family, the others capgeo's tasks. Everything here is computed from the
committed summaries; nothing is fitted on a held-out twin.

**Landmarks.** At 10%, 25% and 50% of the budget (25% primary), among the non-control runs not yet acquired then
(:func:`~capgeo_callbacks.scoring.discrimination.population`): one row a run, its series up to that point.

**Features** travel across tasks: changes and ratios against the run's own early values, never raw levels of a
series whose scale is the model's (:func:`landmark_features`).

- *Base* (:data:`BASE`): the live probability's own features
  (:func:`~capgeo_callbacks.rules.survival.survival_features`): the accuracy (mean of the last three evaluations),
  its gain over the first evaluation and its slope over the last tenth of the budget; the validation loss's fall
  (``log first / current``) and the slope of its log; the weight norm's log change since the first evaluation and
  its slope; the same fall and slope of the training loss; and their gap on the log scale,
  ``log(val/loss) - log(train/loss)`` (each the mean of its last three values), which is the gap
  ``val - train`` made free of the loss's scale.
- *Geometry* (:data:`GEOMETRY`), added to base in the second model. RankMe of each watched layer: its log change
  since its **early value** (the first evaluation at or after the warm-up's end, the learning rate's peak; the
  first evaluation without a warm-up; while the warm-up lasts, the latest one, so the change is 0), its drop from
  its running maximum since then (``(max - last) / max``) and the slope of its log over the last tenth of the
  budget. RankMe at initialisation is the architecture's, and during warm-up every run moves alike, so the early
  value is taken where the run's own learning starts. Layers differ between models, so two summaries travel: the
  **last** (deepest) watched layer, the last RankMe series a run records (they are recorded shallowest first), and
  the **mean** over its layers. The probe: the deepest probed layer's accuracy gain over its first measurement (an
  accuracy: no scale to remove). ILDR (``ildr/<layer>``, where a run records it): its log change since its early
  value, last layer and mean. The commutator defect (``commutator/defect``, where a run records it, every 8th
  evaluation): the log of its current value (the mean of its last three) over its early value, its first value at or
  after the warm-up's end. Every geometric feature is a log ratio, a ratio or a slope of a log: multiplying a run's
  RankMe (or ILDR, or its defect) by any constant leaves it unchanged.
- *Missing values* (a probe not measured yet, a series a run does not record, a slope with one point): the
  feature is imputed 0 (no change) and a 0/1 indicator per group (:data:`MISSING`) says so; no row is dropped.
  The fit records how many rows each indicator flagged.

Each run's features at a landmark are computed once (:meth:`TwinRun.features`), whichever model, family or
comparison reads them.

**Models** (:data:`MODELS`), all of one kind, per landmark: the two primary ones, ``base`` and ``geometry`` (base +
geometry), and for the secondary endpoints each geometric signal alone added to base (:data:`SIGNAL_MODELS`:
``base+rankme``, ``base+probe``, ``base+ildr``, ``base+commutator``; the base features, the signal's group of
:data:`SIGNALS` and its missing indicator). Each is scikit-learn's ``LogisticRegression`` (L2) behind a
``StandardScaler`` in one ``Pipeline`` (a constant column is left unscaled), the penalty ``C`` chosen from
:data:`C_GRID` by the out-of-fold log loss of ``StratifiedGroupKFold`` grouped by run (each run's rows in one fold;
:data:`FOLDS` folds, fewer where a kind has fewer runs), the smaller ``C`` on a tie. Each fold's pipeline
standardises with its own training rows' mean and standard deviation, so a validation fold never informs its own
scaling; the frozen model is the pipeline refitted on every calibration row. Every model sees the same folds
(made once per landmark, recorded in the fit). :func:`fit` returns plain numbers (JSON); :func:`predict` needs
numpy alone.

**The primary endpoint** (:func:`compare`, :func:`decide`): at 25% of the budget, among the held-out runs not yet
acquired, the paired difference in log loss, base minus base + geometry (nats a run; positive: the geometry
helps), the mean over runs with a 95% percentile bootstrap interval that resamples runs within cells
(:func:`~capgeo_callbacks.scoring.paired.paired_difference`, seeded numpy). Decision: **adds** where the lower
bound is above 0; **adds nothing** where the upper bound is below the registered margin; otherwise
**inconclusive**, and inconclusive too where n < 2 or every resample gives one difference (a tie: nothing to
judge). One per family and pooled. Beside it: the paired AUROC difference within cell (pairs of one acquirer and
one non-acquirer of the same cell: which twins, not which cells), the Brier scores, the 10% and 50% landmarks.

**Secondary endpoints, each signal alone** (``secondary`` of :func:`compare`): the same three paired differences of
each model of :data:`SIGNAL_MODELS` against base, on the same runs and the same resamples, per family and pooled,
each judged by the same rule (a secondary result, never the registered decision); inconclusive where no run of the
scope records the signal.

**Short cells** (the registration's short-cell rule): a cell with fewer than :data:`MIN_GROUP` runs of either kind
at a landmark keeps its runs in the log loss and Brier and adds no pair to the AUROC within cell
(:func:`holding_both`); a family with fewer than :data:`MIN_CELLS` cells holding both kinds at 25% of the budget has
its AUROC-based targets judged inconclusive (:func:`auroc_short`).

**Rules** (:func:`rule_leads`): the library's rules, each with its grid of settings
(:data:`~capgeo_callbacks.scoring.leads.GRIDS`), its operating point chosen on the calibration twins by the one
function the registered pages use (:func:`capgeo_callbacks.scoring.leads.rule_leads`: the most acquirers warned
before acquisition, at most 20% of the calibration twins that never acquire and no control alerting; where no point
does, the rule at its default), its held-out lead in steps and as a share of the time to acquisition, false alarms
and controls that alert; the best geometric rule is named on calibration (:func:`best_geometric`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from capgeo_callbacks.keys import COMMUTATOR_DEFECT, ILDR, PROBE_ACC, RANKME, TRAIN_LOSS, VAL_LOSS
from capgeo_callbacks.rules import RunView
from capgeo_callbacks.rules.survival import WINDOW, survival_features
from capgeo_callbacks.scoring.discrimination import MIN_GROUP, SHARES, population
from capgeo_callbacks.scoring.leads import GRIDS, MAX_FALSE_RATE, Alerting, RuleGrid
from capgeo_callbacks.scoring.leads import rule_leads as library_rule_leads
from capgeo_callbacks.scoring.paired import RESAMPLES, Difference, metric, paired_difference
from capgeo_callbacks.scoring.scores import Rate, scored_run
from study.checkout import ROOT
from study.phases.twins_cells import family

FITTED = ROOT / "study" / "twins_fitted.json"
REGISTRATION = ROOT / "study" / "twins_registration.json"  # committed after the pilots (its draft: *_draft.json)
LANDMARKS = SHARES  # 10%, 25%, 50% of the budget
PRIMARY = 0.25
FAMILIES = ("tasks", "grokking")
C_GRID = tuple(float(c) for c in np.logspace(-3, 2, 11))  # 0.001 to 100, two to a decade
FOLDS = 5
RECENT = 3  # a series' current value: the mean of its last three finite values

SURVIVAL = ("acc", "acc_gain", "acc_slope", "loss_drop", "loss_slope", "norm_change", "norm_slope")
BASE = ("acc", "acc_gain", "acc_slope", "val_loss_drop", "val_loss_slope", "train_loss_drop", "train_loss_slope",
        "loss_gap", "norm_change", "norm_slope")
RANKME_FEATURES = ("rankme_change_last", "rankme_change_mean", "rankme_drop_last", "rankme_drop_mean",
                   "rankme_slope_last", "rankme_slope_mean")
SIGNALS = {"rankme": RANKME_FEATURES, "probe": ("probe_gain",), "ildr": ("ildr_change_last", "ildr_change_mean"),
           "commutator": ("commutator_change",)}  # each geometric signal's features
GEOMETRY = tuple(name for features in SIGNALS.values() for name in features)
MISSING = {"missing_base": BASE,  # indicator -> the features it flags
           **{f"missing_{signal}": features for signal, features in SIGNALS.items()}}
SIGNAL_MODELS = {f"base+{signal}": (*BASE, "missing_base", *features, f"missing_{signal}")
                 for signal, features in SIGNALS.items()}  # the secondary endpoints: each signal alone
MODELS = {"base": (*BASE, "missing_base"),
          "geometry": (*BASE, "missing_base", *GEOMETRY, *(f"missing_{signal}" for signal in SIGNALS)),
          **SIGNAL_MODELS}
PRIMARY_MODEL = "geometry"  # the model of the primary endpoint, against base
ADDS, NOTHING, INCONCLUSIVE = "adds", "adds nothing", "inconclusive"
MIN_CELLS = 2  # cells holding both kinds a family needs at the primary landmark for its AUROC-based targets


# ------------------------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class TwinRun:
    """A twin as the analysis reads it: its cell and family, its series and labels (read as the scorer reads every
    run: :func:`~capgeo_callbacks.scoring.scores.scored_run`), and its committed summary, unchanged.

    Attributes:
        name: the run's name.
        cell: the setting it shares with its twins (``sort-medium-b600``, ``grok-add-f0.45-wd1``).
        family: ``tasks`` or ``grokking`` (:func:`family`).
        seed: its seed.
        view: its series.
        acquisition: its acquisition step (None: not within the run).
        acquired_fully: whether it was acquired fully.
        control: a shuffled-answer control (grokking's ``control``), nothing to acquire.
        summary: the committed summary.
    """

    name: str
    cell: str
    family: str
    seed: int | None
    view: RunView
    acquisition: int | None
    acquired_fully: bool
    control: bool
    summary: Mapping[str, Any] = field(repr=False)
    _features: dict[int, dict[str, float]] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def group(self) -> str:
        """The column the scorer's within-group tables put it in: its cell (with its family)."""
        return f"{self.cell}/{self.family}"

    def features(self, end: int) -> dict[str, float]:
        """:func:`landmark_features` at its ``end``-th evaluation, computed once."""
        if end not in self._features:
            self._features[end] = landmark_features(self.view.prefix(end), float(self.view.max_steps or 0))
        return self._features[end]


def twin_run(summary: Mapping[str, Any]) -> TwinRun | None:
    """A twin from its summary: a grokking control (``control``) is a shuffled-answer one; None with fewer than two
    evaluations."""
    cell = str(summary.get("cell"))
    seed = summary.get("seed", (summary.get("settings") or {}).get("seed"))
    name = str(summary.get("name") or f"{cell}-s{seed}")
    control = bool(summary.get("shuffled_answers") or summary.get("control"))
    scored = scored_run({**summary, "shuffled_answers": control}, name)
    if scored is None:
        return None
    return TwinRun(name, cell, family(cell), None if seed is None else int(seed), scored.view, scored.acquisition,
                   scored.acquired_fully, scored.control, summary)


def twin_runs(summaries: Sequence[Mapping[str, Any]]) -> list[TwinRun]:
    runs = [twin_run(summary) for summary in summaries]
    return [run for run in runs if run is not None]


def cell_of(run: TwinRun) -> str:
    return run.cell


# ------------------------------------------------------------------------------------------- features


def early_index(view: RunView) -> int:
    """The first evaluation at or after the warm-up's end (0 without a warm-up; the latest while it lasts)."""
    warmup = view.warmup_steps or 0
    return next((i for i, step in enumerate(view.steps) if step >= warmup), len(view.steps) - 1)


def relative(view: RunView, tag: str, budget: float, start: int) -> tuple[float, float, float]:
    """A positive series' ``(log change since its early value, drop from its running max, slope of its log)``
    from evaluation ``start`` on (module docstring); NaN where it has no finite positive value there."""
    share = np.array(view.steps, dtype=float) / budget
    values = np.array(view.values(tag), dtype=float)
    keep = np.isfinite(values) & (values > 0)
    keep[:start] = False
    if not keep.any():
        return math.nan, math.nan, math.nan
    x, v = share[keep], values[keep]
    logs = np.log(v)
    change = float(np.log(v[-RECENT:].mean()) - logs[0])
    drop = float((v.max() - v[-1]) / v.max())
    recent = x >= share[-1] - WINDOW
    slope = float(np.polyfit(x[recent], logs[recent], 1)[0]) if recent.sum() > 1 and np.ptp(x[recent]) > 0 else 0.0
    return change, drop, slope


def _layers(view: RunView, prefix: str, budget: float, start: int) -> tuple[np.ndarray, np.ndarray]:
    """(the deepest layer's, the mean over layers of) :func:`relative` for every series under ``prefix``."""
    found = np.array([relative(view, tag, budget, start) for tag in view.tags(prefix)]).reshape(-1, 3)
    defined = np.isfinite(found)
    if not defined.any():
        return np.full(3, math.nan), np.full(3, math.nan)
    mean = np.where(defined, found, 0.0).sum(axis=0) / np.maximum(defined.sum(axis=0), 1)
    return found[-1], np.where(defined.any(axis=0), mean, math.nan)  # the mean over the layers that define it


def _recent(view: RunView, tag: str) -> float:
    values = np.array(view.values(tag), dtype=float)
    values = values[np.isfinite(values)]
    return float(values[-RECENT:].mean()) if len(values) else math.nan


def landmark_features(view: RunView, budget: float) -> dict[str, float]:
    """Every feature of :data:`BASE` and :data:`GEOMETRY` at the latest evaluation of ``view`` (module docstring),
    NaN where not defined."""
    survival = survival_features(view, budget, SURVIVAL)
    train = survival_features(view, budget, ("loss_drop", "loss_slope"), loss_key=TRAIN_LOSS)  # the same two
    val_loss, train_loss = _recent(view, VAL_LOSS), _recent(view, TRAIN_LOSS)
    gap = math.log(val_loss / train_loss) if val_loss > 0 and train_loss > 0 else math.nan
    start = early_index(view)
    rankme_last, rankme_mean = _layers(view, RANKME, budget, start)
    ildr_last, ildr_mean = _layers(view, ILDR, budget, start)
    commutator = relative(view, COMMUTATOR_DEFECT, budget, start)[0]
    probes = view.tags(PROBE_ACC)
    probe = np.array(view.values(probes[-1]) if probes else (), dtype=float)
    probe = probe[np.isfinite(probe)]
    return {
        "acc": survival["acc"], "acc_gain": survival["acc_gain"], "acc_slope": survival["acc_slope"],
        "val_loss_drop": survival["loss_drop"], "val_loss_slope": survival["loss_slope"],
        "train_loss_drop": train["loss_drop"], "train_loss_slope": train["loss_slope"], "loss_gap": gap,
        "norm_change": survival["norm_change"], "norm_slope": survival["norm_slope"],
        "rankme_change_last": rankme_last[0], "rankme_change_mean": rankme_mean[0],
        "rankme_drop_last": rankme_last[1], "rankme_drop_mean": rankme_mean[1],
        "rankme_slope_last": rankme_last[2], "rankme_slope_mean": rankme_mean[2],
        "probe_gain": float(probe[-1] - probe[0]) if len(probe) else math.nan,
        "ildr_change_last": ildr_last[0], "ildr_change_mean": ildr_mean[0], "commutator_change": commutator,
    }


def vector(features: Mapping[str, float], names: Sequence[str]) -> np.ndarray:
    """``names`` of ``features`` as numbers: a feature not defined imputed 0 (no change), an indicator of
    :data:`MISSING` 1 where any feature it flags is not defined."""
    def finite(name: str) -> bool:
        value = features.get(name, math.nan)
        return value is not None and math.isfinite(value)

    return np.array([float(not all(finite(flagged) for flagged in MISSING[name])) if name in MISSING
                     else (float(features[name]) if finite(name) else 0.0) for name in names])


# ------------------------------------------------------------------------------------------- models


def cv_folds(outcomes: Sequence[int], groups: Sequence[object], folds: int = FOLDS, seed: int = 0
             ) -> list[tuple[np.ndarray, np.ndarray]]:
    """``StratifiedGroupKFold`` splits (train, validation) in which each group's rows fall in one validation fold:
    at most ``folds``, no more than the runs of the rarer kind; none where that is fewer than 2."""
    from sklearn.model_selection import StratifiedGroupKFold

    y, labels = np.asarray(outcomes, dtype=int), np.array([str(group) for group in groups])
    splits = min(folds, *(len(set(labels[y == kind])) for kind in (0, 1)))
    if splits < 2:
        return []
    folder = StratifiedGroupKFold(n_splits=splits, shuffle=True, random_state=seed)
    return list(folder.split(np.zeros(len(y)), y, labels))


def _pipeline(c: float) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=10_000))


def fit_logistic(x: np.ndarray, outcomes: Sequence[int], groups: Sequence[object],
                 grid: Sequence[float] = C_GRID, folds: int = FOLDS, seed: int = 0,
                 splits: Sequence[tuple[np.ndarray, np.ndarray]] | None = None) -> dict[str, Any]:
    """An L2 logistic regression on standardised ``x``, its ``C`` chosen by grouped cross-validation, each fold
    standardised with its own training rows (module docstring), as plain numbers. ``splits``: the folds
    (:func:`cv_folds` of ``outcomes`` and ``groups`` where not given), so that several models share them."""
    y = np.asarray(outcomes, dtype=int)
    splits = cv_folds(y, groups, folds, seed) if splits is None else list(splits)
    losses: dict[float, float] = {}
    for c in grid if splits else ():
        out_of_fold = np.empty(len(y))
        for train, test in splits:
            out_of_fold[test] = _pipeline(c).fit(x[train], y[train]).predict_proba(x[test])[:, 1]
        losses[c] = float(metric("log_loss", y, out_of_fold)[0])
    chosen = min(losses, key=lambda c: (losses[c], c)) if losses else 1.0  # no CV possible: sklearn's default
    scaler, model = _pipeline(chosen).fit(x, y)  # a constant column: scale 1, centred to 0
    return {"mean": scaler.mean_.tolist(), "scale": scaler.scale_.tolist(), "coef": model.coef_[0].tolist(),
            "intercept": float(model.intercept_[0]), "C": chosen, "folds": len(splits),
            "cv_log_loss": {f"{c:.6g}": loss for c, loss in losses.items()}}


def _rows(runs: Sequence[TwinRun], share: float) -> tuple[list, list[dict[str, float]], dict[str, int]]:
    kept, left = population(runs, share)
    return kept, [run.features(end) for run, end, _ in kept], left


def fit(calibration: Sequence[Mapping[str, Any]], landmarks: Sequence[float] = LANDMARKS,
        grid: Sequence[float] = C_GRID, folds: int = FOLDS, seed: int = 0) -> dict[str, Any]:
    """Every model of :data:`MODELS` (the two primary ones and each signal alone added to base) at each landmark,
    fitted on the calibration twins' summaries on one set of folds (module docstring; ``validation_folds``: the runs
    of each): a dict of plain numbers to freeze as JSON. A landmark with fewer than :data:`MIN_GROUP` runs of a kind
    gets no models (``models`` None, with the reason)."""
    import sklearn

    runs = twin_runs(calibration)
    fits: dict[str, Any] = {}
    for share in landmarks:
        kept, rows, left = _rows(runs, share)
        y = [int(positive) for *_, positive in kept]
        groups = [run.name for run, *_ in kept]  # grouped by run
        entry: dict[str, Any] = {"runs": len(kept), "acquire_later": sum(y), "never": len(y) - sum(y),
                                 "left_out": left, "imputed": {name: int(sum(vector(row, [name])[0] for row in rows))
                                                               for name in MISSING}}
        if min(sum(y), len(y) - sum(y)) < MIN_GROUP:
            entry.update(models=None, reason=f"{sum(y)} runs acquire later and {len(y) - sum(y)} never do: fewer "
                                             f"than {MIN_GROUP} of a kind")
        else:
            splits = cv_folds(y, groups, folds, seed)  # one set of folds for every model
            entry["validation_folds"] = [sorted(groups[i] for i in test) for _, test in splits]
            entry["models"] = {name: {"features": list(names),
                                      **fit_logistic(np.array([vector(row, names) for row in rows]), y, groups,
                                                     grid, folds, seed, splits)} for name, names in MODELS.items()}
        fits[f"{share:g}"] = entry
    return {"what": "twins: base, base + geometry and base + each geometric signal alone, logistic models per "
                    "landmark (study.phases.twins_analysis)",
            "landmarks": [float(share) for share in landmarks], "grid": [float(c) for c in grid], "folds": folds,
            "seed": seed, "scikit_learn": sklearn.__version__, "calibration_runs": sorted(run.name for run in runs),
            "fits": fits}


def probability(model: Mapping[str, Any], features: Mapping[str, float]) -> float:
    """A frozen model's probability of acquisition within the budget for ``features``."""
    z = (vector(features, model["features"]) - np.array(model["mean"])) / np.array(model["scale"])
    logit = model["intercept"] + float(np.dot(model["coef"], z))
    return float(0.5 * (1.0 + math.tanh(0.5 * logit)))  # the logistic function, without overflow


def _models(frozen: Mapping[str, Any], share: float) -> Mapping[str, Any] | None:
    entry = frozen["fits"].get(f"{share:g}")
    return None if entry is None else entry["models"]


def predict(frozen: Mapping[str, Any], summary: Mapping[str, Any], share: float, model: str = PRIMARY_MODEL
            ) -> float | None:
    """The frozen ``model``'s (a name of :data:`MODELS`) probability that the run of ``summary`` acquires within its
    budget, read at ``share`` of it; None where the run is not in the landmark's population (a control, acquired
    already, no evaluation yet) or the landmark has no models."""
    run, models = twin_run(summary), _models(frozen, share)
    kept = population([run], share)[0] if run is not None else []
    if not kept or models is None:
        return None
    _, end, _ = kept[0]
    return probability(models[model], run.features(end))  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------------- the endpoint


def holding_both(cells: Mapping[str, Sequence[int]]) -> list[str]:
    """The cells of ``cells`` (``{cell: [acquire later, never]}``) with at least :data:`MIN_GROUP` runs of each
    kind: the only ones whose pairs enter the AUROC within cell (the registration's short-cell rule)."""
    return [cell for cell, kinds in cells.items() if min(kinds) >= MIN_GROUP]


def _paired(outcomes: Sequence[float], base: Sequence[float], other: Sequence[float], strata: Sequence[str],
            judged: Sequence[str], resamples: int, seed: int) -> dict[str, Difference]:
    """``other`` against ``base`` on the same runs: the log-loss and Brier differences (base minus other) on every
    run, the AUROC difference within cell (other minus base) on the runs of the ``judged`` cells."""
    inside = [i for i, stratum in enumerate(strata) if stratum in judged]

    def pick(values: Sequence[Any]) -> list[Any]:
        return [values[i] for i in inside]

    return {"log_loss": paired_difference(outcomes, base, other, "log_loss", strata, resamples, seed),
            "brier": paired_difference(outcomes, base, other, "brier", strata, resamples, seed),
            "auroc": paired_difference(pick(outcomes), pick(other), pick(base), "auroc", pick(strata), resamples,
                                       seed)}


def compare(frozen: Mapping[str, Any], runs: Sequence[TwinRun], share: float = PRIMARY,
            resamples: int = RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """The models on ``runs`` at ``share`` of the budget against base: the paired log-loss difference (base minus
    the other), the paired AUROC difference within cell (the other minus base) and the Brier difference (base minus
    the other), each with its bootstrap interval resampling runs within cells (the same resamples for every model);
    with n per cell. Base + geometry's at the top (the primary), each signal's alone under ``secondary`` (by its
    name in :data:`SIGNAL_MODELS`, with how many runs record the signal: ``recorded``). A cell short of either kind
    (:func:`holding_both`; ``short_cells``, with its counts) keeps its runs in the log loss and Brier and adds no
    pair to the AUROC."""
    kept, rows, left = _rows(runs, share)
    cells: dict[str, list[int]] = {}
    for run, _, positive in kept:
        cells.setdefault(cell_of(run), [0, 0])[0 if positive else 1] += 1
    judged = holding_both(cells)
    found: dict[str, Any] = {"share": share, "n": len(kept), "cells": cells, "holding_both": judged,
                             "short_cells": {cell: kinds for cell, kinds in cells.items() if cell not in judged},
                             "left_out": left}
    models = _models(frozen, share)
    if models is None:
        empty = {name: Difference(name, len(kept)) for name in ("log_loss", "brier")}
        empty["auroc"] = Difference("auroc", sum(sum(cells[cell]) for cell in judged))
        return {**found, **empty, "secondary": {name: {**empty, "recorded": recorded(rows, name)}
                                                for name in SIGNAL_MODELS}}
    y = [float(positive) for *_, positive in kept]
    strata = [cell_of(run) for run, *_ in kept]
    scores = {name: [probability(model, row) for row in rows] for name, model in models.items()}

    def against_base(name: str) -> dict[str, Any]:
        return _paired(y, scores["base"], scores[name], strata, judged, resamples, seed)

    constant = [calibration_rate(frozen, share)] * len(y)
    found["against_constant"] = {name: paired_difference(y, constant, scores[name], "log_loss", strata, resamples,
                                                         seed) for name in ("base", PRIMARY_MODEL)}
    return {**found, **against_base(PRIMARY_MODEL),
            "secondary": {name: {**against_base(name), "recorded": recorded(rows, name)} for name in SIGNAL_MODELS
                          if name in scores}}


def calibration_rate(frozen: Mapping[str, Any], share: float) -> float:
    """The trivial baseline at ``share`` of the budget: the share of the calibration rows that acquired later, the
    constant probability a model that read nothing would give every run (exploratory, added after the registration:
    ``against_constant`` in :func:`compare`, each model's log loss against it)."""
    entry = frozen["fits"][f"{share:g}"]
    return entry["acquire_later"] / (entry["acquire_later"] + entry["never"])


def recorded(rows: Sequence[Mapping[str, float]], model: str) -> int:
    """How many of ``rows`` define the signal of ``model`` (a name of :data:`SIGNAL_MODELS`): its missing indicator
    is 0."""
    indicator = MODELS[model][-1]
    return sum(vector(row, [indicator])[0] == 0.0 for row in rows)


def decide(difference: Difference, margin: float) -> tuple[str, str]:
    """The registered decision on the log-loss difference (base minus base + geometry) and why, in words; a
    secondary endpoint (a signal alone) is judged by the same rule."""
    if not margin > 0:
        raise ValueError(f"the margin is the smallest gain worth a user's compute, above 0; got {margin!r}")
    if difference.value is None or difference.n < 2:
        return INCONCLUSIVE, f"n = {difference.n}: too few runs to judge"
    if difference.low == difference.high:
        return INCONCLUSIVE, "every resample gives the same difference (a tie): nothing to judge"
    if difference.low > 0:  # type: ignore[operator]
        small = " (below the margin: a gain smaller than worth the compute)" if difference.high < margin else ""  # type: ignore
        return ADDS, f"the interval's lower bound {difference.low:+.3f} is above 0{small}"
    if difference.high < margin:  # type: ignore[operator]
        return NOTHING, f"the interval's upper bound {difference.high:+.3f} is below the margin {margin:g}"
    return INCONCLUSIVE, f"the interval [{difference.low:+.3f}, {difference.high:+.3f}] holds 0 and reaches the " \
                         f"margin {margin:g}"


def auroc_short(found: Mapping[str, Mapping[str, Mapping[str, Any]]], scope: str) -> str | None:
    """Why ``scope``'s AUROC-based targets are judged inconclusive by the short-cell rule (fewer than
    :data:`MIN_CELLS` of its cells hold both kinds at the primary landmark), in words; None where they are judged."""
    entry = found.get(scope, {}).get(f"{PRIMARY:g}")
    if entry is None:
        return f"no {scope} twin scored at {PRIMARY:.0%} of the budget"
    if len(entry["holding_both"]) >= MIN_CELLS:
        return None
    held = len(entry["holding_both"])
    return (f"{held} of its cells {'holds' if held == 1 else 'hold'} at least {MIN_GROUP} twins of each kind at "
            f"{PRIMARY:.0%} of the budget, fewer than {MIN_CELLS} (the short-cell rule)")


def endpoints(frozen: Mapping[str, Any], runs: Sequence[TwinRun], margin: float,
              shares: Sequence[float] = LANDMARKS, resamples: int = RESAMPLES, seed: int = 0
              ) -> dict[str, dict[str, dict[str, Any]]]:
    """:func:`compare` and :func:`decide` per family present and pooled, at each share: ``{scope: {share: ...}}``;
    each secondary endpoint (``secondary``: a signal alone) with its own decision by the same rule, inconclusive
    where no run of the scope records the signal (a model that cannot differ from base says nothing of it)."""
    scopes = {name: [run for run in runs if family(cell_of(run)) == name] for name in FAMILIES}
    scopes = {**{name: found for name, found in scopes.items() if found}, "pooled": list(runs)}
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for scope, members in scopes.items():
        for share in shares:
            entry = compare(frozen, members, share, resamples, seed)
            entry["decision"] = decide(entry["log_loss"], margin)
            for signal in entry["secondary"].values():
                signal["decision"] = decide(signal["log_loss"], margin) if signal["recorded"] else \
                    (INCONCLUSIVE, f"none of the {entry['n']} runs records the signal: nothing to judge")
            found.setdefault(scope, {})[f"{share:g}"] = entry
    return found


# ------------------------------------------------------------------------------------------- rules


VAL_LOSS_RULE = "val-loss-fall"  # the validation-loss rule every geometric rule's lead is compared with


def default_rules() -> list[RuleGrid]:
    """The rules the twins compare, each with its grid (:data:`~capgeo_callbacks.scoring.leads.GRIDS`): the geometric
    ones (the study's RankMe rule, RankMe's fall from its highest value, the probe crossing, ILDR's rise, the
    commutator defect's rise) and the validation-loss, accuracy and loss-onset rules."""
    return list(GRIDS.values())


@dataclass(frozen=True)
class ChosenPoint:
    """How the twins' page prints a rule's operating point: in words, with its calibration counts."""

    text: str
    recall: Rate
    false_alarms: Rate
    controls: Rate

    def __str__(self) -> str:
        return self.text


def rule_leads(rules: Sequence[RuleGrid], calibration: Sequence[TwinRun], heldout: Sequence[TwinRun],
               max_false_rate: float = MAX_FALSE_RATE) -> list[dict[str, Any]]:
    """Per rule, :func:`capgeo_callbacks.scoring.leads.rule_leads` (``lead``), and what the twins' page reads of it:
    its operating point (``point``), the held-out counts (``heldout``) and every acquirer's lead share, 0 where it
    was not warned (``calibration_lead_shares``, ``heldout_lead_shares``)."""
    found = []
    for lead in library_rule_leads(rules, calibration, heldout, max_false_rate):
        cal, held = lead.calibration, lead.heldout
        found.append({"rule": lead.rule, "geometric": lead.geometric, "lead": lead,
                      "point": ChosenPoint(lead.setting, cal.warned, cal.false_alarms, cal.controls),
                      "heldout": {"fired": dict(held.fired), "recall": held.warned,
                                  "false_alarms_never_acquired": held.false_alarms,
                                  "false_alarms_controls": held.controls},
                      "calibration_lead_shares": _shares(cal, calibration),
                      "heldout_lead_shares": _shares(held, heldout)})
    return found


def _shares(found: Alerting, runs: Sequence[TwinRun]) -> dict[str, float]:
    """Every acquirer's lead share, 0 where it was not warned (a run the rule could not read included)."""
    return {run.name: found.shares.get(run.name, 0.0) for run in runs
            if not run.control and run.acquisition is not None}


def best_geometric(leads: Sequence[Mapping[str, Any]]) -> str | None:
    """The geometric rule with the largest mean calibration lead share (misses count 0), then the most calibration
    acquirers warned, then the fewest false alarms; None where no geometric rule has an operating point within the
    calibration caps."""
    def key(entry: Mapping[str, Any]) -> tuple[float, int, int]:
        shares, lead = list(entry["calibration_lead_shares"].values()), entry["lead"]
        return (float(np.mean(shares)) if shares else 0.0, lead.calibration.warned.k,
                -lead.calibration.false_alarms.k)

    chosen = [entry for entry in leads if entry["geometric"] and entry["lead"].chosen]
    return max(chosen, key=key)["rule"] if chosen else None


def lead_difference(leads: Sequence[Mapping[str, Any]], first: str, second: str, runs: Sequence[TwinRun],
                    resamples: int = RESAMPLES, seed: int = 0) -> Difference:
    """The mean held-out lead share of rule ``first`` minus that of ``second`` over the held-out runs that acquire
    (misses count 0), paired, resampling runs within cells."""
    entries = {entry["rule"]: entry for entry in leads}
    acquirers = [run for run in runs if not run.control and run.acquisition is not None]
    a, b = (entries[name]["heldout_lead_shares"] for name in (first, second))
    return paired_difference([0.0] * len(acquirers), [a[run.name] for run in acquirers],
                             [b[run.name] for run in acquirers], "mean", [cell_of(run) for run in acquirers],
                             resamples, seed)
