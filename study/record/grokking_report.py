"""docs/grokking.md: the registered grokking benchmark scored as registered
(``python -m study.record.grokking_report``).

Every figure is computed here from the committed summaries (``corpus/grokking``) and what was fitted on the
calibration runs before the held-out runs started (``study/grokking_fitted.json``); the page says which targets
were met and by how much the others were missed.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from capgeo_callbacks.rules import SurvivalForecaster, make_rule
from capgeo_callbacks.scoring import ScoredRun
from capgeo_callbacks.scoring.discrimination import LEGEND, discrimination, discrimination_table
from capgeo_callbacks.scoring.scores import (
    Rate,
    bootstrap_median,
    error_text,
    first_warning,
    forecast_scores,
    scored_run,
    warning_scores,
    warning_table,
)
from study.checkout import ROOT
from study.phases.grokking import (
    FITTED,
    FOLDER,
    REGISTRATION,
    cell,
    configs,
    late_steps,
    load,
    outcome,
    registration,
    train_step,
)
from study.record import page_command
from study.record import registered as shared

DOC = ROOT / "docs" / "grokking.md"
OUT_OF_FAMILY = ROOT / "study" / "who_learns_fitted.json"
SHARES = (0.25, 0.5)


def with_facts(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The summary with the scorer's run facts (task: the operation, difficulty: the weight decay, controls as
    shuffled answers) and the train-validation loss gap as a series of its own."""
    settings = summary["settings"]
    return {**summary, "series": shared.with_gap(summary["series"]), "task": settings["operation"],
            "difficulty": f"wd{settings['weight_decay']:g}", "shuffled_answers": bool(summary.get("control"))}


def scored(summaries: Sequence[Mapping[str, Any]]) -> list[ScoredRun]:
    runs = [scored_run(with_facts(summary), summary["name"]) for summary in summaries]
    return [run for run in runs if run is not None]


def survival_rules(fitted: Mapping[str, Any]) -> list[SurvivalForecaster]:
    """The probability fitted in family (on the grokking calibration runs) and, where it exists, out of family (on
    capgeo's own tasks), each named for where it was fitted."""
    rules = []
    inside = SurvivalForecaster.from_settings(fitted["survival"])
    inside.name = "survival (fitted on grokking calibration)"
    rules.append(inside)
    if OUT_OF_FAMILY.exists():
        outside = SurvivalForecaster.from_settings(json.loads(OUT_OF_FAMILY.read_text())["survival"])
        outside.name = "survival (fitted on capgeo's tasks)"
        rules.append(outside)
    return rules


def outcomes_table(summaries: Sequence[Mapping[str, Any]], gap: int) -> str:
    """Per operation, weight decay and training fraction: the held-out runs' outcomes."""
    cells: dict[tuple[str, float, float], list[str]] = {}
    for summary in summaries:
        settings = summary["settings"]
        key = (settings["operation"], settings["weight_decay"], settings["fraction"] if not summary["control"] else -1)
        step = summary.get("acquisition_step")
        label = outcome(summary, gap)
        cells.setdefault(key, []).append(f"{label}" + (f" {step}" if label in ("late", "prompt") else ""))
    lines = ["| operation | weight decay | training fraction | runs (outcome and grokking step, by seed) |",
             "| --- | --- | --- | --- |"]
    for (operation, decay, fraction), found in sorted(cells.items()):
        lines.append(f"| {operation} | {decay:g} | {'control' if fraction < 0 else f'{fraction:g}'} | "
                     f"{', '.join(found)} |")
    return "\n".join(lines)


def counts(summaries: Sequence[Mapping[str, Any]], gap: int) -> dict[str, int]:
    found: dict[str, int] = {"late": 0, "prompt": 0, "never": 0, "control": 0}
    for summary in summaries:
        found[outcome(summary, gap)] += 1
    return found


def static_errors(runs: Sequence[ScoredRun], predict: Any) -> list[float]:
    """|predicted - actual| / actual of a forecast fixed before the run (power law, clock) on each held-out run that
    grokked; no prediction: infinite."""
    errors = []
    for run in runs:
        if run.control or run.acquisition is None:
            continue
        predicted = predict(run.summary)
        errors.append(math.inf if predicted is None else abs(predicted - run.acquisition) / run.acquisition)
    return errors


def static_predictors(fitted: Mapping[str, Any]) -> dict[str, Callable[[Mapping[str, Any]], float | None]]:
    """Forecasts fixed before a run from its settings: the power law in the training fraction and the clock, each
    fitted per operation and weight decay on the calibration runs."""
    def law(summary: Mapping[str, Any]) -> float | None:
        params = fitted["power_law"].get(cell(summary))
        if params is None:
            return None
        a, g, b = params
        return a * summary["settings"]["fraction"] ** -g + b

    def clock(summary: Mapping[str, Any]) -> float | None:
        return fitted["clock"].get(cell(summary))

    return {"power law in the training fraction": law, "clock": clock}


def forecast_rows(runs: Sequence[ScoredRun], fitted: Mapping[str, Any], rules: Sequence[Any]) -> list[dict[str, Any]]:
    """At half the time to grokking: each forecaster's median error [95%], runs without a forecast, coverage."""
    rows = []
    for rule in rules:
        entry = forecast_scores(rule, runs, fractions=(0.5,))["fractions"]["0.5"]
        rows.append({"name": rule.name, "median": entry["median_error"], "entry": entry,
                     "coverage": entry["coverage"]})
    for name, predict in static_predictors(fitted).items():
        errors = static_errors(runs, predict)
        finite = [e for e in errors if math.isfinite(e)]
        entry = {"n": len(errors), "median_error": float(np.median(errors)) if errors else None,
                 "interval": bootstrap_median(errors) if finite else None}
        rows.append({"name": name, "median": entry["median_error"], "entry": entry, "coverage": None})
    twice = shared.twice_now_at_half(runs)
    rows.append({"name": "twice the current step", "median": twice["median_error"], "entry": twice,
                 "coverage": None})
    return rows


def cost_lines(summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    by_phase: dict[str, list[float]] = {}
    for summary in summaries:
        by_phase.setdefault(summary["phase"], []).append(float(summary.get("cpu_seconds") or 0.0))
    return [f"- {phase}: {len(values)} runs, {sum(values) / 3600:.2f} CPU-hours (median "
            f"{statistics.median(values) / 60:.1f} CPU-minutes a run)" for phase, values in by_phase.items()]


def page(path: Path = REGISTRATION) -> str:
    found = registration(path)
    gap = late_steps(path)
    calibration, heldout = load("calibration", path), load("heldout", path)
    fitted = json.loads(FITTED.read_text())
    cal_runs, runs = scored(calibration), scored(heldout)
    rules = survival_rules(fitted)
    inside = rules[0]
    numbers = counts(heldout, gap)
    parts = [
        "# The grokking benchmark (registered)",
        "",
        "<!-- generated by: python -m study.record.grokking_report -->",
        f"Grokking of `a + b` and `a - b` mod {found['fixed']['p']}, trained by a user's own function "
        "([examples/grokking](../examples/grokking/grokking.py)) with capgeo attached as the README prints it, "
        "launched through the launcher on a grid of training fraction x weight decay. Registered before any run "
        "([study/grokking_registration.json](../study/grokking_registration.json)); pilots at seed 1000, never "
        "reported, chose the grid ([examples/grokking/PILOTS.md](../examples/grokking/PILOTS.md)). Everything fitted "
        f"was fitted on the {len(calibration)} calibration runs (seed 0) and frozen before the held-out runs "
        "([study/grokking_fitted.json](../study/grokking_fitted.json)).",
        "",
        f"Held-out runs (seeds {', '.join(map(str, found['heldout']['seeds']))}): {len(heldout)}, of which "
        f"{numbers['late']} grokked late (training accuracy 0.9 at least {gap} steps before validation accuracy held "
        f"0.5), {numbers['prompt']} grokked without that delay, {numbers['never']} never grokked within "
        f"{found['fixed']['max_steps']:,} steps, and {numbers['control']} are shuffled-answer controls.",
        "",
        *shared.partial_note(len(heldout), len(configs("heldout", path))),
        outcomes_table(heldout, gap),
        "",
        "Which commit added which held-out runs, and the code each ran (the fit's commit):",
        "",
        shared.commits_table(FOLDER / "heldout", heldout),
        "",
        "What the probability reads: the elapsed share of the budget, the accuracy (its level, gain and slope), the "
        "validation loss (its fall and slope) and the weight norm (its change and slope). **It holds no geometric "
        "feature** (no RankMe, no probe).",
        "",
        "## Will it grok within the budget? (AUROC)",
        "",
        LEGEND + " Directions of the scores without one a priori come from the calibration runs at the same share, "
        "only where the calibration AUROC's 95% interval excludes 0.5 (else \"no direction\", the raw AUROC). "
        f"`{shared.GAP}`: the train-validation loss gap. Each registered warning scores 1 once it has alerted.",
        "",
    ]
    warning_rules = [inside, make_rule("study"), make_rule("probe-crossing"), make_rule("loss-onset")]
    fired = {rule.name: {run.name: first_warning(rule, run.view) for run in [*runs, *cal_runs]}
             for rule in warning_rules[1:]}
    found_auroc = discrimination(runs, fired=fired, forecasters=rules, shares=SHARES, calibration=cal_runs)
    parts += [discrimination_table(found_auroc), ""]
    ours_name = f"forecast: {inside.name}"
    for share in SHARES:
        better = shared.beaten_by(found_auroc, share, ours_name)
        parts.append(f"- At {share:.0%} of the budget the probability's pooled AUROC is "
                     f"{shared.pooled(found_auroc, share).get(ours_name)}; "
                     + ("tied or beaten by: " + "; ".join(better) + "." if better else "no baseline ties or beats it."))
    registered_way = discrimination(runs, fired=fired, forecasters=rules, shares=SHARES, calibration=cal_runs,
                                    directions="point")
    parts += ["", "The registration fixed each series' direction by the calibration AUROC's side of 0.5, whatever its "
              "interval; where that differs from the strict direction above, its column:", "",
              shared.registered_directions(found_auroc, registered_way), ""]
    half = shared.pooled(registered_way, 0.5).get(ours_name)
    half_value = half.value if half else None
    scores = [warning_scores(rule, runs) for rule in warning_rules]
    parts += ["## Warnings (as registered)", "",
              "A warning counts only before grokking. The probability's warning: it first reaches 0.5.", "",
              warning_table(scores), "", "## The probability's alert", "",
              shared.before_evidence(inside, runs), "",
              *shared.alert_section("the probability", shared.probability(inside), cal_runs, runs)]
    statics = {name: (lambda run, view, predict=predict: None if (found := predict(run.summary)) is None
                      else (float(found), None, None)) for name, predict in static_predictors(fitted).items()}
    parts += ["## The forecast at shares of the budget", "",
              *shared.forecast_section({inside.name: shared.rule_predictor(inside),
                                 "acc-trend": shared.rule_predictor(make_rule("acc-trend")), **statics}, runs), ""]
    rows = forecast_rows(runs, fitted, [inside, *rules[1:], make_rule("acc-trend")])
    parts += ["## When? The grokking step forecast at half the time to it (as registered)", "",
              "At half the time to grokking, \"twice the current step\" is exact by construction (but for the "
              "evaluations' spacing): its row says so.", "",
              "| forecaster | median error [95%] | interval holds the step |", "| --- | --- | --- |"]
    for row in rows:
        parts.append(f"| {row['name']} | {error_text(row['entry'])} (n={row['entry']['n']}) | "
                     f"{row['coverage'] if row['coverage'] is not None else '-'} |")
    law = next(row for row in rows if row["name"].startswith("power law"))
    ours = rows[0]
    coverage: Rate = ours["coverage"]
    targets = found["targets"]
    parts += ["", "## Targets, as registered", "",
              "Judged as registered (directions as registered); ties with a baseline are said on the AUROC lines "
              "above.", "",
              f"- The probability's AUROC at 50% of the budget >= "
              f"{targets['probability_auroc_at_half_budget_at_least']}: "
              f"{'-' if half_value is None else f'{half_value:.2f}'}, "
              f"{shared.met(half_value, targets['probability_auroc_at_half_budget_at_least'])} "
              f"(Wang et al. 2026 report about 0.93 offline).",
              f"- Its forecast's median error at half the time to grokking at most half the power law's: "
              f"{shared.fmt(ours['median'])} against 0.5 x {shared.fmt(law['median'])}, "
              f"{shared.met(ours['median'], 0.5 * law['median'] if law['median'] is not None else math.nan, False)}.",
              f"- Its interval's coverage >= {targets['interval_coverage_at_least']}: {coverage}, "
              f"{shared.met(coverage.value, targets['interval_coverage_at_least'])}.",
              "", "## Cost", "", *cost_lines([*calibration, *heldout]), "<!-- end generated -->"]
    return "\n".join(parts)


def write_report() -> str:
    text = page()
    DOC.write_text(text + "\n")
    return text


def readme_line() -> str:
    """One line for the README's first screen, from the same figures."""
    heldout = load("heldout")
    fitted = json.loads(FITTED.read_text())
    rules = survival_rules(fitted)
    found = discrimination(scored(heldout), forecasters=rules[:1], shares=(0.5,),
                           calibration=scored(load("calibration")))
    cells = shared.pooled(found, 0.5)
    ours = f"forecast: {rules[0].name}"
    better = shared.beaten_by(found, 0.5, ours)
    made, registered = len(heldout), len(configs("heldout"))
    partial = "" if made >= registered else f" (partial: {made} of {registered} registered runs made so far)"
    return (f"**Who will grok.** On the field's benchmark, grokking of modular arithmetic, {made} registered "
            f"held-out runs{partial}: the probability of grokking within the budget (accuracy, loss and weight norm, "
            f"no geometry), at half the budget, separates the runs that will grok from those that will not with "
            f"AUROC {cells.get(ours, '-')}; the accuracy alone: {cells.get('acc', '-')}, the validation loss: "
            f"{cells.get('val/loss', '-')}, the weight norm: {cells.get('weight_norm/global', '-')}. "
            + shared.beaten_sentence(better)
            + " ([docs/grokking.md](docs/grokking.md)).")


__all__ = ["page", "readme_line", "train_step", "write_report"]


def main(argv: Sequence[str] | None = None) -> None:
    page_command("grokking_report", "docs/grokking.md", write_report, readme_line, argv)


if __name__ == "__main__":
    main()
