"""docs/grokking.md: the registered grokking benchmark scored as registered
(``python -m study.record.grokking_report``).

Every figure is computed here from the committed summaries (``study/corpus/grokking``) and what was fitted on the
calibration runs before the held-out runs started (``study/grokking_fitted.json``); the page says which targets
were met and by how much the others were missed.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from capgeo_callbacks.rules import Rule, SurvivalForecaster, make_rule
from capgeo_callbacks.scoring import ScoredRun
from capgeo_callbacks.scoring.discrimination import LEGEND, discrimination_table, discriminations
from capgeo_callbacks.scoring.leads import RuleLead
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
from study.registrations.policy import registered_rule

DOC = ROOT / "docs" / "grokking.md"
OUT_OF_FAMILY = ROOT / "study" / "who_learns_fitted.json"
SHARES = (0.25, 0.5)
GROK = ("grok", "grokked")  # the event's words on this page


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
                 "interval": bootstrap_median(errors) if finite else None, "no_forecast": len(errors) - len(finite)}
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


@dataclass(frozen=True)
class Figures:
    """Everything the page and the README's lines read, computed once per process and registration
    (:func:`figures`)."""

    registration: Mapping[str, Any]
    gap: int
    calibration: Sequence[Mapping[str, Any]]
    heldout: Sequence[Mapping[str, Any]]
    fitted: Mapping[str, Any]
    cal_runs: Sequence[ScoredRun]
    runs: Sequence[ScoredRun]
    rules: Sequence[SurvivalForecaster]  # in family, then out of family where it exists
    warnings: Sequence[Any]
    strict: Mapping[str, Any]  # the AUROC tables, directions fixed only where calibration's interval excludes 0.5
    registered: Mapping[str, Any]  # the same, directions fixed as registered (calibration's side of 0.5)
    forecasts: Sequence[Mapping[str, Any]]  # each forecaster at half the time to grokking
    settings: Sequence[Mapping[str, Any]]
    leads: Sequence[RuleLead]  # the registered warnings as registered, then every rule with its grid


def registered_names(found: Mapping[str, Any]) -> list[str]:
    """The registered warnings but the probability's (it has its own alert): capgeo's, then the comparators."""
    return [name for name in [*found["warnings"]["capgeo"], *found["warnings"]["comparators"]] if name != "survival"]


def registered_warnings(found: Mapping[str, Any]) -> list[Rule]:
    """The registered warnings of :func:`registered_names`, each as the library's rule now (one registered under a
    former name: named as registered, with its name now beside it)."""
    return [registered_rule(name) for name in registered_names(found)]


def run_settings(run: ScoredRun) -> dict[str, Any]:
    """A run's settings as the settings-alone model reads them: the operation, and the weight decay and the
    training fraction as numbers (the held-out fractions lie between the calibration ones)."""
    settings = run.summary["settings"]
    return {"operation": str(settings["operation"]), "weight decay": float(settings["weight_decay"]),
            "training fraction": float(settings["fraction"])}


def probability_at(rule: SurvivalForecaster) -> Callable[[ScoredRun, int], float]:
    """The probability at a run's first ``end`` evaluations (NaN where it gives none)."""
    live = shared.probability(rule)

    def value(run: ScoredRun, end: int) -> float:
        found = live(run.view.prefix(end))
        return math.nan if found is None else found
    return value


def figures(path: Path = REGISTRATION) -> Figures:
    """Every figure of the page, computed once per process and registration (``figures()`` and
    ``figures(REGISTRATION)`` are one computation)."""
    return _figures(Path(path).resolve())


@functools.cache
def _figures(path: Path) -> Figures:
    calibration, heldout = load("calibration", path), load("heldout", path)
    fitted = json.loads(FITTED.read_text())
    cal_runs, runs = scored(calibration), scored(heldout)
    rules = survival_rules(fitted)
    warnings = [rules[0], *registered_warnings(registration(path))]
    fired = {rule.name: {run.name: first_warning(rule, run.view) for run in [*runs, *cal_runs]}
             for rule in warnings[1:]}
    both = discriminations(runs, fired=fired, forecasters=rules, shares=SHARES, calibration=cal_runs)
    settings = shared.settings_rows(runs, cal_runs, run_settings, probability_at(rules[0]), SHARES)
    found = registration(path)
    registered = [shared.registered_grid(rule, "" if name in found["warnings"]["capgeo"] else "comparator")
                  for name, rule in zip(registered_names(found), warnings[1:], strict=True)]
    return Figures(found, late_steps(path), calibration, heldout, fitted, cal_runs, runs, rules,
                   warnings, both["interval"], both["point"],
                   forecast_rows(runs, fitted, [rules[0], *rules[1:], make_rule("acc-trend")]), settings,
                   shared.every_rule_lead(registered, cal_runs, runs))


def targets(f: Figures) -> list[tuple[str, str]]:
    """Each registered target as judged as registered: the page's line and the README's clause."""
    targets = f.registration["targets"]
    ours_name = f"forecast: {f.rules[0].name}"
    half = shared.pooled(f.registered, 0.5).get(ours_name)
    half_value = half.value if half else None
    floor = targets["probability_auroc_at_half_budget_at_least"]
    law = next(row for row in f.forecasts if row["name"].startswith("power law"))
    ours = f.forecasts[0]
    law_half = 0.5 * law["median"] if law["median"] is not None else math.nan
    coverage: Rate = ours["coverage"]
    cover = targets["interval_coverage_at_least"]
    return [(f"The probability's AUROC at 50% of the budget >= {floor}: {shared.fmt(half_value)}, "
             f"{shared.met(half_value, floor)} (Wang et al. 2026 report about 0.93 offline).",
             f"the probability's AUROC at half the budget >= {floor}: "
             f"{shared.met(half_value, floor).split(' by')[0]} ({shared.fmt(half_value)})"),
            (f"Its forecast's median error at half the time to grokking at most half the power law's: "
             f"{shared.fmt(ours['median'])} against 0.5 x {shared.fmt(law['median'])}, "
             f"{shared.met(ours['median'], law_half, False)}.",
             f"its forecast's error at half the time to grokking at most half the power law's: "
             f"{shared.met(ours['median'], law_half, False).split(' by')[0]} ({shared.fmt(ours['median'])} against "
             f"0.5 x {shared.fmt(law['median'])})"),
            (f"Its interval's coverage >= {cover}: {coverage}, {shared.met(coverage.value, cover)}.",
             f"its interval's coverage >= {cover}: {shared.met(coverage.value, cover).split(' by')[0]} ({coverage})")]


def page(path: Path = REGISTRATION) -> str:
    f = figures(path)
    found, gap, calibration, heldout, fitted = f.registration, f.gap, f.calibration, f.heldout, f.fitted
    cal_runs, runs, rules = f.cal_runs, f.runs, f.rules
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
        f"{found['fixed']['max_steps']:,} steps, and {numbers['control']} are shuffled-answer controls. At each "
        "share of the budget the AUROC counts the non-control runs not yet grokked there: the controls and the runs "
        "grokked by then are left out (the counts below say how many).",
        "",
        *shared.partial_note(len(heldout), len(configs("heldout", path))),
        outcomes_table(heldout, gap),
        "",
        "What the probability reads: the elapsed share of the budget, the accuracy (its level, gain and slope), the "
        "validation loss (its fall and slope) and the weight norm (its change and slope). **It holds no geometric "
        "feature** (no RankMe, no probe). How well the runs' settings alone tell them apart: "
        "[below](grokking.md#the-runs-settings-alone-exploratory-added-after-the-registration).",
        "",
        "## Will it grok within the budget? (AUROC)",
        "",
        LEGEND + " Directions of the scores without one a priori come from the calibration runs at the same share, "
        "only where the calibration AUROC's 95% interval excludes 0.5 (else \"no direction\", the raw AUROC). "
        f"`{shared.GAP}`: the train-validation loss gap. Each registered warning scores 1 once it has alerted.",
        "",
    ]
    parts += [discrimination_table(f.strict), ""]
    ours_name = f"forecast: {inside.name}"
    probability = probability_at(inside)
    parts += [shared.share_line(f.strict, runs, share, ours_name, probability,
                                shared.left_out_words(runs, share, GROK)) for share in SHARES]
    parts += ["", "The registration fixed each series' direction by the calibration AUROC's side of 0.5, whatever its "
              "interval; where that differs from the strict direction above, its column:", "",
              shared.registered_directions(f.strict, f.registered), ""]
    for share in SHARES:
        better = shared.beaten_by(f.registered, share, ours_name)
        parts.append(f"- At {share:.0%} of the budget, with the directions as registered, the probability is "
                     + ("tied or beaten by: " + "; ".join(better) + "." if better else "tied or beaten by no single "
                        "series."))
    parts += ["", *shared.settings_section(f.settings, "each run's operation, weight decay and training fraction",
                                           sum(not run.control for run in cal_runs)), ""]
    scores = [warning_scores(rule, runs) for rule in f.warnings]
    parts += ["## Warnings (as registered)", "",
              "A warning counts only before grokking. The probability's warning: it first reaches 0.5.", "",
              warning_table(scores), "", "## The probability's alert", "",
              shared.before_evidence(inside, runs), "",
              *shared.alert_section("the probability", shared.probability(inside), cal_runs, runs),
              *shared.leads_section(f.leads, cal_runs, ("grok", "grokking"))]
    statics = {name: (lambda run, view, predict=predict: None if (found := predict(run.summary)) is None
                      else (float(found), None, None)) for name, predict in static_predictors(fitted).items()}
    parts += ["## The forecast at shares of the budget", "",
              *shared.forecast_section({inside.name: shared.rule_predictor(inside),
                                 "acc-trend": shared.rule_predictor(make_rule("acc-trend")), **statics}, runs), ""]
    parts += ["## When? The grokking step forecast at half the time to it (as registered)", "",
              "At half the time to grokking, \"twice the current step\" is exact by construction (but for the "
              "evaluations' spacing): its row says so.", "",
              "| forecaster | median error [95%] | runs without a forecast | interval holds the step |",
              "| --- | --- | --- | --- |"]
    for row in f.forecasts:
        entry = row["entry"]
        parts.append(f"| {row['name']} | {error_text(entry)} (n={entry['n']}) | {entry['no_forecast']} of "
                     f"{entry['n']} | {row['coverage'] if row['coverage'] is not None else '-'} |")
    parts += ["", "## Targets, as registered", "",
              "Judged as registered (directions as registered); ties with a baseline are said on the AUROC lines "
              "above.", ""]
    parts += [f"- {text}" for text, _ in targets(f)]
    parts += ["", "## Cost", "", *cost_lines([*calibration, *heldout]), "",
              *shared.provenance_section(FOLDER / "heldout", heldout), "<!-- end generated -->"]
    return "\n".join(parts)


def write_report() -> str:
    text = page()
    DOC.write_text(text + "\n")
    return text


def cell_text(found: Mapping[str, Any], share: float, name: str) -> str:
    """A pooled AUROC with its interval, without its n (the README gives the groups once)."""
    value = shared.pooled(found, share).get(name)
    return "-" if value is None or value.value is None else f"{value.value:.2f} [{value.low:.2f}, {value.high:.2f}]"


def readme_line() -> str:
    """One line for the README's first screen, from the same figures."""
    f = figures()
    ours = f"forecast: {f.rules[0].name}"
    made, registered = len(f.heldout), len(configs("heldout"))
    partial = "" if made >= registered else f" (partial: {made} of {registered} registered runs made so far)"
    settings = next(row for row in f.settings if row["share"] == 0.5)
    strict_norm = shared.pooled(f.strict, 0.5).get("weight_norm/global")
    return (f"**Who will grok** ([docs/grokking.md](docs/grokking.md)). On the field's benchmark, grokking of modular "
            f"arithmetic, {made} registered held-out runs{partial}. At half the budget "
            f"({shared.left_out_words(f.runs, 0.5, GROK)}) the "
            "probability of grokking within the budget (accuracy, loss and weight norm, no geometry) separates the "
            f"runs that will grok from those that will not with AUROC {cell_text(f.registered, 0.5, ours)}; the "
            f"accuracy alone: {cell_text(f.registered, 0.5, 'acc')}, the validation loss: "
            f"{cell_text(f.registered, 0.5, 'val/loss')}, the weight norm: "
            f"{cell_text(f.registered, 0.5, 'weight_norm/global')} in its registered direction "
            f"({'-' if strict_norm is None or strict_norm.value is None else f'{strict_norm.value:.2f}'} raw); the "
            "runs' settings alone (operation, weight decay and training fraction; exploratory, added after the "
            f"registration): {settings['auroc'].value:.2f} [{settings['auroc'].low:.2f}, {settings['auroc'].high:.2f}]"
            f", the probability {shared.shown(settings['difference']).replace(':', ' than them:')}. "
            + shared.beaten_sentence(shared.beaten_by(f.registered, 0.5, ours), shared.beaten_by(f.strict, 0.5, ours))
            + ". Beside it, " + shared.leads_clause(f.leads, "docs/grokking.md", "grok") + ".")


def targets_line() -> str:
    """The README's line on the registered targets of the grokking benchmark, and the out-of-family test."""
    f = figures()
    clauses = [clause for _, clause in targets(f)]
    if len(f.rules) > 1:
        outside = f"forecast: {f.rules[1].name}"
        clauses.append("the probability fitted on capgeo's own tasks, registered as the out-of-family test: AUROC "
                       + " and ".join(f"{cell_text(f.registered, share, outside)} at {share:.0%} of the budget"
                                      for share in SHARES))
    return ("**Who will grok, the registered targets** ([as registered](docs/grokking.md#targets-as-registered)): "
            + "; ".join(clauses) + ".")


__all__ = ["figures", "page", "readme_line", "targets_line", "train_step", "write_report"]


def main(argv: Sequence[str] | None = None) -> None:
    page_command("grokking_report", "docs/grokking.md", write_report, readme_line, argv, {"targets": targets_line})


if __name__ == "__main__":
    main()
