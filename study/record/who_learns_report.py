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
from capgeo_callbacks.scoring.scores import Rate, error_text, first_warning, forecast_scores, scored_run
from study.checkout import ROOT
from study.phases.who_learns import FITTED, FOLDER, REGISTRATION, jobs, load, registration
from study.record import page_command
from study.record import registered as shared

DOC = ROOT / "docs" / "who-learns.md"
QUARTER = 0.25
BASELINES = ("acc", "val/loss", "weight_norm/global")


def scored(summaries: Sequence[Mapping[str, Any]]) -> list[ScoredRun]:
    runs = [scored_run({**summary, "series": shared.with_gap(summary["series"])}, summary["name"])
            for summary in summaries]
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
    """The probability at a run's first ``end`` evaluations (:func:`study.record.registered.probability`)."""
    live = shared.probability(rule)

    def value(run: ScoredRun, end: int) -> float:
        found = live(run.view.prefix(end))
        return math.nan if found is None else found
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


def brier_tags(runs: Sequence[ScoredRun]) -> list[str]:
    """The registered baselines, then every other series the runs record."""
    recorded = dict.fromkeys(tag for run in runs for tag in run.view.series)
    return [*BASELINES, *(tag for tag in recorded if tag not in BASELINES)]


def brier_rows(runs: Sequence[ScoredRun], calibration: Sequence[ScoredRun], survival: SurvivalForecaster,
               share: float = QUARTER, tags: Sequence[str] = BASELINES) -> list[dict[str, Any]]:
    """The Brier score at ``share`` of the budget of the probability and of each series (``tags``) mapped to one, on
    the held-out runs not yet acquired there (non-controls), with n."""
    kept, _ = population(runs, share)
    scorers = {"survival (the probability)": probability_of(survival),
               **{tag: baseline_probabilities(calibration, tag, share) for tag in tags}}
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
        "What the probability reads: the elapsed share of the budget, the accuracy (its level, gain and slope), the "
        "validation loss (its fall and slope) and the weight norm (its change and slope). **It holds no geometric "
        "feature** (no RankMe, no probe): whatever it tells, it tells from the accuracy, the loss and the norm. "
        "(The accuracy's first value is 0 on every run here, so `acc` and `acc_gain` are one column twice: the fit "
        "gave them the same coefficient.) The runs that never acquire were made so by their settings (a budget too "
        "short, a learning rate ten times too low), which the weight norm and the loss see: the registered test asks "
        "who will learn among runs that differ in their settings, not among twins (issue 44 asks that).",
        "",
        f"Held-out runs: {len(heldout)}: {positives} acquired within their budget, {negatives} non-control runs did "
        f"not, {controls} shuffled-answer controls.",
        "",
        *shared.partial_note(len(heldout), len(jobs("heldout"))),
        outcomes_table(heldout),
        "",
        "Which commit added which held-out runs, and the code each ran (the fit's commit):",
        "",
        shared.commits_table(FOLDER / "heldout", heldout),
        "",
        "## AUROC",
        "",
        LEGEND + " Directions of the scores without one a priori come from the calibration runs at the same share, "
        "only where the calibration AUROC's 95% interval excludes 0.5 (else \"no direction\", the raw AUROC). "
        f"`{shared.GAP}`: the train-validation loss gap. The registered warning (`{found['warning']['name']}`) "
        "scores 1 once it has alerted.",
        "",
    ]
    fired = {found["warning"]["name"]: {run.name: first_warning(make_rule(found["warning"]["name"]), run.view)
                                        for run in [*runs, *cal_runs]}}
    forecasters = [survival, clock]
    found_auroc = discrimination(runs, fired=fired, forecasters=forecasters, calibration=cal_runs)
    parts += [discrimination_table(found_auroc), ""]
    ours_name = "forecast: survival"
    for share in (0.1, QUARTER, 0.5):
        better = shared.beaten_by(found_auroc, share, ours_name)
        mine = shared.pooled(found_auroc, share).get(ours_name)
        parts.append(f"- At {share:.0%} of the budget the probability's pooled AUROC is {mine}; "
                     + ("tied or beaten by: " + "; ".join(better) + "." if better else "no baseline ties or beats it."))
    registered_way = discrimination(runs, fired=fired, forecasters=forecasters, calibration=cal_runs,
                                    directions="point")
    parts += ["", "Where the way the directions were fixed when registered (the calibration AUROC's side of 0.5, "
              "whatever its interval) gives another direction than the strict one above:", "",
              shared.registered_directions(found_auroc, registered_way), ""]
    quarter = {name: cell.value for name, cell in shared.pooled(registered_way, QUARTER).items()}
    ours = quarter.get(ours_name)
    briers = brier_rows(runs, cal_runs, survival, tags=brier_tags(runs))
    parts += ["## Brier score at 25% of the budget", "",
              "Mean squared difference between a probability and the outcome (lower is better), on the held-out "
              "runs not yet acquired at 25% of their budget; each series' value mapped to a probability by "
              "logistic regression fitted on the calibration runs at the same share (the registered baselines "
              "first, then every other recorded series).", "",
              "| probability | Brier score | runs |", "| --- | --- | --- |"]
    parts += [f"| {row['name']} | {shared.fmt(row['brier'], 3)} | {row['n']} |" for row in briers]
    parts += ["", "## The probability's alert", "", shared.before_evidence(survival, runs), "",
              *shared.alert_section("the probability", shared.probability(survival), cal_runs, runs)]
    parts += ["## The forecast at shares of the budget", "",
              *shared.forecast_section({"survival": shared.rule_predictor(survival),
                                        "clock": shared.rule_predictor(clock),
                                        "acc-trend": shared.rule_predictor(make_rule("acc-trend"))}, runs), ""]
    forecasts = [forecast_scores(rule, runs, fractions=(0.5,)) for rule in (survival, clock, make_rule("acc-trend"))]
    parts += ["## When? The forecast at half the time to acquisition (as registered)", "",
              "At half the time to acquisition, \"twice the current step\" is exact by construction (but for the "
              "evaluations' spacing): the row below says so.", "",
              "| forecaster | median error [95%] | interval holds the step |", "| --- | --- | --- |"]
    for entry in forecasts:
        half = entry["fractions"]["0.5"]
        parts.append(f"| {entry['rule']} | {error_text(half)} (n={half['n']}) | {half['coverage']} |")
    twice = shared.twice_now_at_half(runs)
    parts.append(f"| twice the current step | {error_text(twice)} (n={twice['n']}) | - |")
    ours_error = forecasts[0]["fractions"]["0.5"]["median_error"]
    clock_error = forecasts[1]["fractions"]["0.5"]["median_error"]
    coverage: Rate = forecasts[0]["fractions"]["0.5"]["coverage"]
    targets = found["targets"]
    ours_brier = briers[0]["brier"]
    parts += ["", "## Targets, as registered", "",
              "Judged as registered (directions as registered); a tie with a baseline is said beside the verdict.", "",
              f"- AUROC at 25% of the budget >= {targets['auroc_at_quarter_budget_at_least']}: "
              f"{shared.fmt(ours)}, {shared.met(ours, targets['auroc_at_quarter_budget_at_least'])}."]
    for tag in targets["auroc_above_every_single_series_at_quarter_budget"]:
        theirs = quarter.get(tag)
        both = ours is not None and theirs is not None
        verdict = "met" if both and ours > theirs else "missed" + (f" by {theirs - ours:.2f}" if both else "")
        tie = " (a tie)" if both and abs(ours - theirs) < shared.TIE else ""
        parts.append(f"- AUROC above {tag}'s ({shared.fmt(theirs)}): {verdict}{tie}.")
    for row in briers[1:1 + len(BASELINES)]:
        parts.append(f"- Brier score below {row['name']}'s ({shared.fmt(row['brier'], 3)}): "
                     f"{shared.fmt(ours_brier, 3)}, "
                     + ("met" if ours_brier is not None and row["brier"] is not None and ours_brier < row["brier"]
                        else "missed") + ".")
    half_clock = 0.5 * clock_error if clock_error is not None else math.nan
    parts += [f"- Forecast error at half the time at most half the clock's: {shared.fmt(ours_error)} against 0.5 x "
              f"{shared.fmt(clock_error)}, {shared.met(ours_error, half_clock, False)}.",
              f"- Interval coverage >= {targets['interval_coverage_at_least']}: {coverage}, "
              f"{shared.met(coverage.value, targets['interval_coverage_at_least'])}.",
              "<!-- end generated -->"]
    return "\n".join(parts)


def readme_line() -> str:
    """The README's line on who will learn, from the same figures as the page."""
    heldout = load("heldout")
    survival, clock = fitted_rules()
    survival.name = "survival"
    found = discrimination(scored(heldout), forecasters=[survival, clock], shares=(QUARTER,),
                           calibration=scored(load("calibration")))
    cells = shared.pooled(found, QUARTER)
    better = shared.beaten_by(found, QUARTER, "forecast: survival")
    made, registered = len(heldout), len(jobs("heldout"))
    partial = "" if made >= registered else f" (partial: {made} of {registered} registered runs made so far)"
    return (f"**Who will learn.** On {made} registered held-out runs of capgeo's own tasks{partial}, runs made to "
            "fail by their settings (a budget too short, a learning rate too low), the probability of acquisition "
            "(which reads the accuracy, the loss and the weight norm, no geometry) at a quarter of the budget "
            f"separates the runs that will acquire from those that will not with AUROC "
            f"{cells.get('forecast: survival', '-')}; the accuracy alone: {cells.get('acc', '-')}, the validation "
            f"loss: {cells.get('val/loss', '-')}, the weight norm: {cells.get('weight_norm/global', '-')}. "
            + shared.beaten_sentence(better)
            + " ([docs/who-learns.md](docs/who-learns.md)).")


def write_report() -> str:
    text = page()
    DOC.write_text(text + "\n")
    return text


__all__ = ["page", "readme_line", "write_report", "REGISTRATION"]


def main(argv: Sequence[str] | None = None) -> None:
    page_command("who_learns_report", "docs/who-learns.md", write_report, readme_line, argv)


if __name__ == "__main__":
    main()
