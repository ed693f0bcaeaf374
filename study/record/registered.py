"""What both registered pages (docs/who-learns.md, docs/grokking.md) say the same way: the runs each commit added,
every baseline beside the probability, the forecast at shares of the budget, and the alert's operating point.

Each function takes the scored calibration and held-out runs and returns markdown; the pages only choose which
rules and baselines they hold. Nothing here is fitted on a held-out run.
"""

from __future__ import annotations

import math
import statistics
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from capgeo_callbacks.rules import Rule, RunView, SurvivalForecaster
from capgeo_callbacks.scoring import ScoredRun
from capgeo_callbacks.scoring.discrimination import BASELINE
from capgeo_callbacks.scoring.operating import (
    Predictor,
    budget_forecasts,
    choose_operating_point,
    fired_at,
    score_path,
    twice_now,
)
from capgeo_callbacks.scoring.scores import bootstrap_median, error_text, warning_scores, warning_table
from study.checkout import ROOT

GAP = "val/loss - train/loss"  # the train-validation loss gap, derived from the two recorded losses
TIE = 0.005  # AUROCs closer than this (both printed to two places) are a tie


def with_gap(series: Mapping[str, Any]) -> dict[str, Any]:
    """``series`` with the train-validation loss gap as a series of its own, where both losses are recorded."""
    found = dict(series)
    train = {step: value for step, value in found.get("train/loss", []) if value is not None}
    gap = [[step, value - train[step]] for step, value in found.get("val/loss", [])
           if value is not None and step in train]
    if gap:
        found[GAP] = gap
    return found


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return "none" if math.isinf(value) else f"{value:.{digits}f}"


def met(value: float | None, target: float, above: bool = True) -> str:
    """'met' or 'missed by x' against a registered target (no figure: missed)."""
    if value is None or math.isnan(value):
        return "missed (no figure)"
    ok = value >= target if above else value <= target
    return "met" if ok else f"missed by {abs(value - target):.2f}"


def partial_note(made: int, registered: int) -> list[str]:
    """What a page says while only part of the registered held-out runs is in: the figures are provisional."""
    if made >= registered:
        return []
    return [f"**Partial: {made} of the {registered} registered held-out runs are made so far** (the others were not "
            "run yet, none was left out). Every figure below is on those alone and provisional; the targets are "
            "judged as registered only on all of them.", ""]


# ------------------------------------------------------------------------------------------- provenance


def commits_table(folder: Path, summaries: Sequence[Mapping[str, Any]]) -> str:
    """Which runs each commit added to ``folder`` (git's history of the files), with the code they ran."""
    log = subprocess.run(["git", "log", "--diff-filter=A", "--format=@%h %ad", "--date=short", "--name-only", "--",
                          str(folder.relative_to(ROOT))], cwd=ROOT, capture_output=True, text=True, check=False,
                         timeout=60).stdout
    added: dict[str, str] = {}
    commit = ""
    for line in log.splitlines():
        if line.startswith("@"):
            commit = line[1:]
        elif line.strip():
            added[Path(line.strip()).name] = commit
    code = {f"{summary['name']}.json.gz": str(summary.get("commit") or "-")[:7] for summary in summaries}
    rows: dict[tuple[str, str], list[str]] = {}
    for name in sorted(code):
        rows.setdefault((added.get(name, "not committed yet"), code[name]), []).append(name.removesuffix(".json.gz"))
    lines = ["| commit that added them | code they ran | runs |", "| --- | --- | --- |"]
    lines += [f"| {commit} | `{ran}` | {len(names)}: {', '.join(names)} |" for (commit, ran), names in rows.items()]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- baselines


def pooled(found: Mapping[str, Any], share: float) -> dict[str, Any]:
    """Each row's pooled AUROC at ``share`` of the budget."""
    return {row["name"]: row["cells"]["pooled"] for row in found[f"{share:g}"]["rows"]}


def beaten_by(found: Mapping[str, Any], share: float, ours: str) -> list[str]:
    """The scores whose pooled AUROC at ``share`` ties or beats ``ours``'s, each with the difference; a score whose
    direction was not fixed before scoring is marked so (its raw AUROC is no prediction)."""
    mine = pooled(found, share).get(ours)
    if mine is None or mine.value is None:
        return []
    said = []
    for row in found[f"{share:g}"]["rows"]:
        cell = row["cells"]["pooled"]
        if row["name"] in (ours, BASELINE) or cell.value is None or cell.value < mine.value - TIE:
            continue
        said.append(f"{row['name']} {cell.value:.2f} (" + ("a tie" if abs(cell.value - mine.value) < TIE else
                                                            f"+{cell.value - mine.value:.2f}")
                    + ("; raw, no direction fixed" if row["direction"] is None else "") + ")")
    return said


def beaten_sentence(better: Sequence[str]) -> str:
    """The README's words for :func:`beaten_by`'s list."""
    if not better:
        return "No single series ties or beats it"
    return f"Tied or beaten by {len(better)} single series (" + "; ".join(better) + ")"


def registered_directions(strict: Mapping[str, Any], registered: Mapping[str, Any]) -> str:
    """Where the registered way of fixing directions (calibration's side of 0.5) differs from the strict one
    (calibration's interval must exclude 0.5): the registered column, beside the strict table."""
    lines = ["| share | score | direction as registered | pooled AUROC as registered | strict direction |",
             "| --- | --- | --- | --- | --- |"]
    for share, entry in registered.items():
        strict_rows = {row["name"]: row for row in strict[share]["rows"]}
        for row in entry["rows"]:
            other = strict_rows[row["name"]]
            if row["direction"] != other["direction"]:
                lines.append(f"| {float(share):.0%} | {row['name']} | {row['source']} | {row['cells']['pooled']} | "
                             f"{other['source']} |")
    return "\n".join(lines) if len(lines) > 2 else "The registered and the strict directions agree on every score."


# ------------------------------------------------------------------------------------------- the alert


def probability(rule: SurvivalForecaster) -> Callable[[RunView], float | None]:
    def value(view: RunView) -> float | None:
        found = rule.predict(view)
        return None if found is None else found[0]
    return value


def alert_section(name: str, score: Callable[[RunView], float | None], calibration: Sequence[ScoredRun],
                  heldout: Sequence[ScoredRun]) -> list[str]:
    """The operating point of ``score``'s alert, chosen on the calibration runs, and what it gives held out."""
    cal_paths = [(run, score_path(run, score)) for run in calibration]
    point = choose_operating_point(cal_paths)
    lines = [f"An alert of {name} at a threshold and a number of consecutive evaluations, chosen on the calibration "
             "runs only: the most calibration acquirers alerted before acquisition, while at most 20% of the "
             "calibration runs that never acquire and no calibration control alert.", ""]
    if point is None:
        return lines + ["No operating point alerts on any calibration acquirer within those limits: the alert is off "
                        "(it would ring on runs that never acquire, or on controls).", ""]
    lines += [f"Operating point: {point}. On the calibration runs: recall {point.recall}, runs that never acquire "
              f"alerted {point.false_alarms}, controls alerted {point.controls}.", ""]
    paths = [(run, score_path(run, score)) for run in heldout]
    scores = warning_scores(f"{name}, {point}", heldout, fired=fired_at(paths, point))
    lines += ["Held out:", "", warning_table([scores]), ""]
    if scores["false_alarms_controls"].k:
        lines += [f"**A shuffled-answer control alerts ({scores['false_alarms_controls']}): a failure.**", ""]
    return lines


def before_evidence(rule: SurvivalForecaster, heldout: Sequence[ScoredRun]) -> str:
    """What the probability says before any evidence: its value with every feature at zero (the intercept alone,
    at the start of the budget), and its median at the runs' second evaluation (its first defined value)."""
    coef = rule.coef_ or {}
    intercept = 1.0 - math.exp(-((1.0 / math.exp(coef.get("Intercept", 0.0))) ** rule.rho_))
    early = sorted(value for run in heldout if (value := probability(rule)(run.view.prefix(2))) is not None)
    median = early[len(early) // 2] if early else math.nan
    return (f"Before any evidence (every feature 0 at the start of the budget: the intercept alone) the probability "
            f"is {intercept:.2f}; at the held-out runs' first defined evaluation its median is {fmt(median)} "
            f"(n={len(early)}). It is a prior of this family's calibration runs, not a reading of the run.")


# ------------------------------------------------------------------------------------------- forecasts


def rule_predictor(rule: Rule) -> Predictor:
    def predict(run: ScoredRun, view: RunView) -> tuple[float, float | None, float | None] | None:
        found = rule.forecast(view) if hasattr(rule, "forecast") else None
        if found is None:
            return None
        predicted, low, high = found
        return float(predicted), low, high
    return predict


def forecast_section(predictors: Mapping[str, Predictor], runs: Sequence[ScoredRun]) -> list[str]:
    """The forecast at 10%, 25% and 50% of the budget, each forecaster beside "twice the current step"."""
    found = budget_forecasts({**predictors, "twice the current step": twice_now}, runs)
    lines = ["At each share of the budget, among the non-control runs not yet acquired: for those that acquire "
             "later, the median of |predicted - actual| / actual [bootstrap 95%] (no forecast: infinite), the share "
             "whose interval holds the actual step and the interval's mean width as a share of that step; for those "
             "that never acquire, the share whose forecast lies within the budget (a false promise).", "",
             "| share | forecaster | median error [95%] | interval holds the step | mean width | false promises |",
             "| --- | --- | --- | --- | --- | --- |"]
    for share, entry in found.items():
        for name, row in entry.items():
            lines.append(f"| {float(share):.0%} | {name} | {error_text(row)} (n={row['n']}) | {row['coverage']} | "
                         f"{fmt(row['mean_width'])} | {row['false_promises']} |")
    return lines


def twice_now_at_half(runs: Sequence[ScoredRun]) -> dict[str, Any]:
    """"Twice the current step" scored as the half-way table scores a forecaster: at the last evaluation at or
    before half the time to acquisition (exact there but for the evaluations' spacing)."""
    errors = []
    for run in runs:
        if run.control or run.acquisition is None:
            continue
        steps = [step for step in run.view.steps if step <= 0.5 * run.acquisition]
        now = steps[-1] if steps else 0
        errors.append(abs(2 * now - run.acquisition) / run.acquisition if now > 0 else math.inf)
    finite = [error for error in errors if math.isfinite(error)]
    return {"n": len(errors), "median_error": statistics.median(errors) if errors else None,
            "interval": bootstrap_median(errors) if finite else None}
