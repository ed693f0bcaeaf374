"""docs/who-learns.md: the registered test of who will learn, scored as registered (``python -m
study.record.who_learns_report``).

Every figure is computed here from the committed summaries (``corpus/who-learns``) and from what was fitted on the
calibration runs before the held-out runs started (``study/who_learns_fitted.json``); the baselines are mapped to
probabilities on the calibration runs here, deterministically. The page says which targets were met and by how much
the others were missed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from capgeo_callbacks.rules import ClockForecaster, SurvivalForecaster, make_rule
from capgeo_callbacks.scoring import ScoredRun
from capgeo_callbacks.scoring.discrimination import LEGEND, discrimination, discrimination_table, population
from capgeo_callbacks.scoring.scores import Rate, error_text, forecast_scores, scored_run
from study.checkout import ROOT
from study.phases.who_learns import FITTED, REGISTRATION, jobs, load, registration
from study.record import page_command

DOC = ROOT / "docs" / "who-learns.md"
QUARTER = 0.25
BASELINES = ("acc", "val/loss", "weight_norm/global")


def scored(summaries: Sequence[Mapping[str, Any]]) -> list[ScoredRun]:
    runs = [scored_run(summary, summary["name"]) for summary in summaries]
    return [run for run in runs if run is not None]


def fitted_rules() -> tuple[SurvivalForecaster, ClockForecaster]:
    fitted = json.loads(FITTED.read_text())
    survival = SurvivalForecaster.from_settings(fitted["survival"])
    clock = ClockForecaster.from_settings(fitted["clock"])
    return survival, clock


def last_value(run: ScoredRun, end: int, tag: str) -> float:
    values = [v for v in run.view.prefix(end).values(tag) if math.isfinite(v)]
    return values[-1] if values else math.nan


def probability_of(rule: SurvivalForecaster) -> Callable[[ScoredRun, int], float]:
    def value(run: ScoredRun, end: int) -> float:
        found = rule.predict(run.view.prefix(end))
        return math.nan if found is None else found[0]
    return value


def baseline_probabilities(calibration: Sequence[ScoredRun], tag: str, share: float
                           ) -> Callable[[ScoredRun, int], float]:
    """A single series' value at the point, mapped to a probability by scikit-learn's LogisticRegression fitted on
    the calibration runs not yet acquired at the same share of the budget."""
    from sklearn.linear_model import LogisticRegression

    kept, _ = population(calibration, share)
    x = np.array([[last_value(run, end, tag)] for run, end, _ in kept])
    y = np.array([positive for *_, positive in kept], dtype=int)
    keep = np.isfinite(x[:, 0])
    model = LogisticRegression().fit(x[keep], y[keep])

    def value(run: ScoredRun, end: int) -> float:
        found = last_value(run, end, tag)
        return math.nan if not math.isfinite(found) else float(model.predict_proba([[found]])[0, 1])
    return value


def brier_rows(runs: Sequence[ScoredRun], calibration: Sequence[ScoredRun], survival: SurvivalForecaster,
               share: float = QUARTER) -> list[dict[str, Any]]:
    """The Brier score at ``share`` of the budget of the probability and of each baseline mapped to one, on the
    held-out runs not yet acquired there (non-controls), with n."""
    kept, _ = population(runs, share)
    scorers = {"survival (the probability)": probability_of(survival),
               **{tag: baseline_probabilities(calibration, tag, share) for tag in BASELINES}}
    rows = []
    for name, scorer in scorers.items():
        pairs = [(scorer(run, end), positive) for run, end, positive in kept]
        pairs = [(p, y) for p, y in pairs if math.isfinite(p)]
        brier = float(np.mean([(p - y) ** 2 for p, y in pairs])) if pairs else None
        rows.append({"name": name, "brier": brier, "n": len(pairs)})
    return rows


def outcomes_table(summaries: Sequence[Mapping[str, Any]]) -> str:
    cells: dict[tuple[str, str], list[str]] = {}
    for summary in summaries:
        step = summary.get("acquisition_step")
        cells.setdefault((summary["task"], summary["setting"]), []).append(
            f"s{summary['seed']} {'-' if step is None else step}")
    lines = ["| task | setting | acquisition step by seed (-: not within the budget) |", "| --- | --- | --- |"]
    lines += [f"| {task} | {setting} | {', '.join(found)} |" for (task, setting), found in sorted(cells.items())]
    return "\n".join(lines)


def _met(value: float | None, target: float, above: bool = True) -> str:
    if value is None or math.isnan(value):
        return "missed (no figure)"
    ok = value >= target if above else value <= target
    return "met" if ok else f"missed by {abs(value - target):.2f}"


def page() -> str:
    found = registration()
    calibration, heldout = load("calibration"), load("heldout")
    cal_runs, runs = scored(calibration), scored(heldout)
    survival, clock = fitted_rules()
    survival.name = "survival"
    positives = sum(run.acquisition is not None and not run.control for run in runs)
    negatives = sum(run.acquisition is None and not run.control for run in runs)
    controls = sum(run.control for run in runs)
    parts = [
        "# Who will learn (registered)",
        "",
        "<!-- generated by: python -m study.record.who_learns_report -->",
        "capgeo's probability of acquisition within the budget (`survival`: a Weibull time-to-acquisition model of "
        "the run's own series, docs/design.md, \"The probability of acquisition\"), measured as a classifier against "
        "runs that fail, not only against controls. Registered before any run "
        "([study/who_learns_registration.json](../study/who_learns_registration.json)); fitted on the "
        f"{len(calibration)} calibration runs (seeds 0-2) and frozen before the held-out runs "
        "([study/who_learns_fitted.json](../study/who_learns_fitted.json)). The pilots that chose the settings, "
        "never reported as results: [who-learns-pilots.md](who-learns-pilots.md).",
        "",
        f"Held-out runs: {len(heldout)}: {positives} acquired within their budget, {negatives} non-control runs did "
        f"not, {controls} shuffled-answer controls.",
        "",
        *partial_note(len(heldout), len(jobs("heldout"))),
        outcomes_table(heldout),
        "",
        "## AUROC",
        "",
        LEGEND + " Directions of the scores without one a priori come from the calibration runs at the same share.",
        "",
    ]
    found_auroc = discrimination(runs, forecasters=[survival], calibration=cal_runs)
    parts += [discrimination_table(found_auroc), ""]
    quarter = {row["name"]: row["cells"]["pooled"].value for row in found_auroc["0.25"]["rows"]}
    ours = quarter.get("forecast: survival")
    briers = brier_rows(runs, cal_runs, survival)
    parts += ["## Brier score at 25% of the budget", "",
              "Mean squared difference between a probability and the outcome (lower is better), on the held-out "
              "runs not yet acquired at 25% of their budget; each baseline's value mapped to a probability by "
              "logistic regression fitted on the calibration runs at the same share.", "",
              "| probability | Brier score | runs |", "| --- | --- | --- |"]
    parts += [f"| {row['name']} | {_fmt(row['brier'], 3)} | {row['n']} |" for row in briers]
    forecasts = [forecast_scores(rule, runs, fractions=(0.5,)) for rule in (survival, clock, make_rule("acc-trend"))]
    parts += ["", "## When? The forecast at half the time to acquisition", "",
              "| forecaster | median error [95%] | interval holds the step |", "| --- | --- | --- |"]
    for entry in forecasts:
        half = entry["fractions"]["0.5"]
        parts.append(f"| {entry['rule']} | {error_text(half)} (n={half['n']}) | {half['coverage']} |")
    ours_error = forecasts[0]["fractions"]["0.5"]["median_error"]
    clock_error = forecasts[1]["fractions"]["0.5"]["median_error"]
    coverage: Rate = forecasts[0]["fractions"]["0.5"]["coverage"]
    targets = found["targets"]
    ours_brier = briers[0]["brier"]
    parts += ["", "## Targets, as registered", "",
              f"- AUROC at 25% of the budget >= {targets['auroc_at_quarter_budget_at_least']}: "
              f"{_fmt(ours)}, {_met(ours, targets['auroc_at_quarter_budget_at_least'])}."]
    for tag in targets["auroc_above_every_single_series_at_quarter_budget"]:
        theirs = quarter.get(tag)
        both = ours is not None and theirs is not None
        verdict = "met" if both and ours > theirs else "missed" + (f" by {theirs - ours:.2f}" if both else "")
        parts.append(f"- AUROC above {tag}'s ({_fmt(theirs)}): {verdict}.")
    for row in briers[1:]:
        parts.append(f"- Brier score below {row['name']}'s ({_fmt(row['brier'], 3)}): {_fmt(ours_brier, 3)}, "
                     + ("met" if ours_brier is not None and row["brier"] is not None and ours_brier < row["brier"]
                        else "missed") + ".")
    half_clock = 0.5 * clock_error if clock_error is not None else math.nan
    parts += [f"- Forecast error at half the time at most half the clock's: {_fmt(ours_error)} against 0.5 x "
              f"{_fmt(clock_error)}, {_met(ours_error, half_clock, False)}.",
              f"- Interval coverage >= {targets['interval_coverage_at_least']}: {coverage}, "
              f"{_met(coverage.value, targets['interval_coverage_at_least'])}.",
              "<!-- end generated -->"]
    return "\n".join(parts)


def readme_line() -> str:
    """The README's line on who will learn, from the same figures as the page."""
    heldout = load("heldout")
    survival, _ = fitted_rules()
    survival.name = "survival"
    found = discrimination(scored(heldout), forecasters=[survival], shares=(0.25,),
                           calibration=scored(load("calibration")))
    cells = {row["name"]: row["cells"]["pooled"] for row in found["0.25"]["rows"]}
    made, registered = len(heldout), len(jobs("heldout"))
    partial = "" if made >= registered else f" (partial: {made} of {registered} registered runs made so far)"
    return (f"**Who will learn.** On {made} registered held-out runs of capgeo's own tasks{partial}, the "
            f"probability of acquisition at a quarter of the budget tells the runs that will acquire from those "
            f"that will not with "
            f"AUROC {cells.get('forecast: survival', '-')}; the accuracy alone: {cells.get('acc', '-')}, the "
            f"validation loss: {cells.get('val/loss', '-')} ([docs/who-learns.md](docs/who-learns.md)).")


def partial_note(made: int, registered: int) -> list[str]:
    """What a page says while only part of the registered held-out runs is in: the figures are provisional."""
    if made >= registered:
        return []
    return [f"**Partial: {made} of the {registered} registered held-out runs are made so far** (the others were not "
            "run yet, none was left out). Every figure below is on those alone and provisional; the targets are "
            "judged as registered only on all of them.", ""]


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return "none" if math.isinf(value) else f"{value:.{digits}f}"


def write_report() -> str:
    text = page()
    DOC.write_text(text + "\n")
    return text


__all__ = ["page", "partial_note", "readme_line", "write_report", "REGISTRATION"]


def main(argv: Sequence[str] | None = None) -> None:
    page_command("who_learns_report", "docs/who-learns.md", write_report, readme_line, argv)


if __name__ == "__main__":
    main()
