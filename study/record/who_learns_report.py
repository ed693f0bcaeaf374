"""docs/who-learns.md: the registered test of who will learn, scored as registered (``python -m
study.record.who_learns_report``).

Every figure is computed here from the committed summaries (``study/corpus/who-learns``) and from what was fitted on the
calibration runs before the held-out runs started (``study/who_learns_fitted.json``); the baselines are mapped to
probabilities on the calibration runs here, deterministically. The page says which targets were met and by how much
the others were missed.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from capgeo_callbacks.rules import ClockForecaster, SurvivalForecaster, make_rule
from capgeo_callbacks.scoring import ScoredRun
from capgeo_callbacks.scoring.discrimination import (
    LEGEND,
    SHARES,
    discrimination_table,
    discriminations,
    population,
)
from capgeo_callbacks.scoring.leads import RuleLead
from capgeo_callbacks.scoring.paired import Difference, paired_difference
from capgeo_callbacks.scoring.scores import Rate, error_text, first_warning, forecast_scores, scored_run
from study.checkout import ROOT
from study.phases.who_learns import FITTED, FOLDER, REGISTRATION, jobs, load, registration
from study.record import page_command
from study.record import registered as shared
from study.registrations.policy import registered_rule

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
    the held-out runs not yet acquired there (non-controls), with n and each run's (probability, outcome)."""
    kept, _ = population(runs, share)
    scorers = {"survival (the probability)": probability_of(survival),
               **{tag: baseline_probabilities(calibration, tag, share) for tag in tags}}
    rows = []
    for name, scorer in scorers.items():
        values = {run.name: (scorer(run, end), float(positive)) for run, end, positive in kept}
        values = {key: (p, y) for key, (p, y) in values.items() if math.isfinite(p)}
        brier = float(np.mean([(p - y) ** 2 for p, y in values.values()])) if values else None
        rows.append({"name": name, "brier": brier, "n": len(values), "values": values})
    return rows


def paired_brier(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> Difference:
    """Our Brier score minus theirs on the runs both scored, with a paired bootstrap interval (below 0: ours
    better)."""
    names = [name for name in ours["values"] if name in theirs["values"]]
    return paired_difference([ours["values"][name][1] for name in names], [ours["values"][name][0] for name in names],
                             [theirs["values"][name][0] for name in names], "brier")


def outcomes_table(summaries: Sequence[Mapping[str, Any]]) -> str:
    cells: dict[tuple[str, str], list[str]] = {}
    for summary in summaries:
        step = summary.get("acquisition_step")
        cells.setdefault((summary["task"], summary["setting"]), []).append(
            f"s{summary['seed']} {'-' if step is None else step}")
    lines = ["| task | setting | acquisition step by seed (-: not within the budget) |", "| --- | --- | --- |"]
    lines += [f"| {task} | {setting} | {', '.join(found)} |" for (task, setting), found in sorted(cells.items())]
    return "\n".join(lines)


@dataclass(frozen=True)
class Figures:
    """Everything the page and the README's lines read, computed once per process (:func:`figures`)."""

    registration: Mapping[str, Any]
    calibration: Sequence[Mapping[str, Any]]
    heldout: Sequence[Mapping[str, Any]]
    cal_runs: Sequence[ScoredRun]
    runs: Sequence[ScoredRun]
    survival: SurvivalForecaster
    clock: ClockForecaster
    fired: Mapping[str, Mapping[str, int | None]]
    strict: Mapping[str, Any]  # the AUROC tables, directions fixed only where calibration's interval excludes 0.5
    registered: Mapping[str, Any]  # the same, directions fixed as registered (calibration's side of 0.5)
    briers: Sequence[Mapping[str, Any]]
    forecasts: Sequence[Mapping[str, Any]]  # survival, clock, acc-trend at half the time to acquisition
    settings: Sequence[Mapping[str, Any]]
    leads: Sequence[RuleLead]  # the registered warning as registered, then every rule with its grid


def run_settings(run: ScoredRun) -> dict[str, Any]:
    """A run's settings as the settings-alone model reads them: the task, and the learning rate and the budget on
    a log scale (the registered settings differ tenfold and a few fold)."""
    return {"task": str(run.summary["task"]), "log10 lr": math.log10(float(run.summary["lr"])),
            "log10 budget": math.log10(float(run.summary["max_steps"]))}


@functools.cache
def figures() -> Figures:
    found = registration()
    calibration, heldout = load("calibration"), load("heldout")
    cal_runs, runs = scored(calibration), scored(heldout)
    survival, clock = fitted_rules()
    survival.name = "survival"
    warning = found["warning"]["name"]
    fired = {warning: {run.name: first_warning(make_rule(warning), run.view) for run in [*runs, *cal_runs]}}
    both = discriminations(runs, fired=fired, forecasters=[survival, clock], calibration=cal_runs)
    forecasts = [forecast_scores(rule, runs, fractions=(0.5,)) for rule in (survival, clock, make_rule("acc-trend"))]
    settings = shared.settings_rows(runs, cal_runs, run_settings, probability_of(survival), SHARES)
    registered = shared.registered_grid(registered_rule(warning, found["warning"]))
    return Figures(found, calibration, heldout, cal_runs, runs, survival, clock, fired, both["interval"],
                   both["point"], brier_rows(runs, cal_runs, survival, tags=brier_tags(runs)), forecasts, settings,
                   shared.every_rule_lead([registered], cal_runs, runs))


OURS = "forecast: survival"


def targets(f: Figures) -> list[tuple[str, str]]:
    """Each registered target as judged as registered, as the page's lines and the README's clauses (a point
    comparison met as registered stays met; whether a paired interval shows the difference is said beside it)."""
    targets = f.registration["targets"]
    quarter = shared.pooled(f.registered, QUARTER)
    ours = quarter[OURS].value if OURS in quarter else None
    floor = targets["auroc_at_quarter_budget_at_least"]
    lines = [f"AUROC at 25% of the budget >= {floor}: {shared.fmt(ours)}, {shared.met(ours, floor)}."]
    clauses = [f"AUROC at a quarter of the budget >= {floor}: {shared.met(ours, floor).split(' by')[0]} "
               f"({shared.fmt(ours)})"]
    rows = {row["name"]: row for row in f.registered[f"{QUARTER:g}"]["rows"]}
    tags = targets["auroc_above_every_single_series_at_quarter_budget"]
    compared, verdicts = [], []
    for tag in tags:
        theirs = quarter[tag].value if tag in quarter else None
        both = ours is not None and theirs is not None
        verdict = "met as registered" if both and ours > theirs else "missed" + (
            f" by {theirs - ours:.2f}" if both else "")
        tie = " (a tie)" if both and abs(ours - theirs) < shared.TIE else ""
        paired = shared.paired_auroc(f.runs, QUARTER, probability_of(f.survival),
                                     shared.series_value(f.runs, tag, rows[tag]["direction"]))
        compared.append((tag, paired))
        verdicts.append((verdict, f"{tag} {shared.fmt(theirs)}"))
        lines.append(f"AUROC above {tag}'s ({shared.fmt(theirs)}): {verdict}{tie}; paired, the probability's AUROC "
                     f"minus {tag}'s: {shared.shown(paired)} (n={paired.n}).")
    clauses.append(f"AUROC above each single series': {shared.verdicts_clause(verdicts)}; "
                   + shared.paired_clause(compared))
    ours_brier = f.briers[0]
    compared, verdicts = [], []
    for row in f.briers[1:1 + len(BASELINES)]:
        ok = ours_brier["brier"] is not None and row["brier"] is not None and ours_brier["brier"] < row["brier"]
        paired = paired_brier(ours_brier, row)
        compared.append((row["name"], paired))
        verdicts.append(("met as registered" if ok else "missed", f"{row['name']} {shared.fmt(row['brier'], 3)}"))
        lines.append(f"Brier score below {row['name']}'s ({shared.fmt(row['brier'], 3)}): "
                     f"{shared.fmt(ours_brier['brier'], 3)}, {'met as registered' if ok else 'missed'}; paired, the "
                     f"probability's minus {row['name']}'s: {shared.shown(paired, lower_is_better=True)} "
                     f"(n={paired.n}).")
    clauses.append(f"Brier score ({shared.fmt(ours_brier['brier'], 3)}) below each single series': "
                   f"{shared.verdicts_clause(verdicts)}; "
                   + shared.paired_clause(compared, lower_is_better=True))
    half = [entry["fractions"]["0.5"] for entry in f.forecasts]
    ours_error, clock_error = half[0]["median_error"], half[1]["median_error"]
    half_clock = 0.5 * clock_error if clock_error is not None else math.nan
    coverage: Rate = half[0]["coverage"]
    floor = targets["interval_coverage_at_least"]
    lines += [f"Forecast error at half the time at most half the clock's: {shared.fmt(ours_error)} against 0.5 x "
              f"{shared.fmt(clock_error)}, {shared.met(ours_error, half_clock, False)}.",
              f"Interval coverage >= {floor}: {coverage}, {shared.met(coverage.value, floor)}."]
    clauses += [f"the forecast's error at half the time to acquisition at most half the clock's: "
                f"{shared.met(ours_error, half_clock, False).split(' by')[0]} ({shared.fmt(ours_error)} against 0.5 x "
                f"{shared.fmt(clock_error)})",
                f"its interval's coverage >= {floor}: {shared.met(coverage.value, floor).split(' by')[0]} "
                f"({coverage})"]
    return [(line, "") for line in lines] + [("", clause) for clause in clauses]


def page() -> str:
    f = figures()
    found, calibration, heldout, runs, cal_runs = f.registration, f.calibration, f.heldout, f.runs, f.cal_runs
    survival, clock = f.survival, f.clock
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
        "who will learn among runs that differ in their settings, not among twins (a test on twin runs asks that). "
        "How well those settings alone tell the runs apart: "
        "[below](who-learns.md#the-runs-settings-alone-exploratory-added-after-the-registration).",
        "",
        f"Held-out runs: {len(heldout)}: {positives} acquired within their budget, {negatives} non-control runs did "
        f"not, {controls} shuffled-answer controls. At each share of the budget the AUROC counts the non-control runs "
        "not yet acquired there: the controls and the runs acquired by then are left out (the counts below say how "
        "many).",
        "",
        *shared.partial_note(len(heldout), len(jobs("heldout"))),
        outcomes_table(heldout),
        "",
        "## AUROC",
        "",
        LEGEND + " Directions of the scores without one a priori come from the calibration runs at the same share, "
        "only where the calibration AUROC's 95% interval excludes 0.5 (else \"no direction\", the raw AUROC). "
        f"`{shared.GAP}`: the train-validation loss gap. The registered warning (`{found['warning']['name']}`) "
        "scores 1 once it has alerted.",
        "",
    ]
    parts += [discrimination_table(f.strict), ""]
    probability = probability_of(survival)
    parts += [shared.share_line(f.strict, runs, share, OURS, probability, shared.left_out_words(runs, share))
              for share in SHARES]
    parts += ["", "Where the way the directions were fixed when registered (the calibration AUROC's side of 0.5, "
              "whatever its interval) gives another direction than the strict one above:", "",
              shared.registered_directions(f.strict, f.registered), ""]
    parts += [*shared.settings_section(f.settings, "each run's task, learning rate and budget (the last two on a log "
                                       "scale)", sum(not run.control for run in cal_runs)), ""]
    parts += ["## Brier score at 25% of the budget", "",
              "Mean squared difference between a probability and the outcome (lower is better), on the held-out "
              "runs not yet acquired at 25% of their budget; each series' value mapped to a probability by "
              "logistic regression fitted on the calibration runs at the same share (the registered baselines "
              "first, then every other recorded series).", "",
              "| probability | Brier score | runs |", "| --- | --- | --- |"]
    parts += [f"| {row['name']} | {shared.fmt(row['brier'], 3)} | {row['n']} |" for row in f.briers]
    parts += ["", "## The probability's alert", "", shared.before_evidence(survival, runs), "",
              *shared.alert_section("the probability", shared.probability(survival), cal_runs, runs)]
    parts += shared.leads_section(f.leads, cal_runs)
    parts += ["## The forecast at shares of the budget", "",
              *shared.forecast_section({"survival": shared.rule_predictor(survival),
                                        "clock": shared.rule_predictor(clock),
                                        "acc-trend": shared.rule_predictor(make_rule("acc-trend"))}, runs), ""]
    parts += ["## When? The forecast at half the time to acquisition (as registered)", "",
              "At half the time to acquisition, \"twice the current step\" is exact by construction (but for the "
              "evaluations' spacing): the row below says so.", "",
              "| forecaster | median error [95%] | runs without a forecast | interval holds the step |",
              "| --- | --- | --- | --- |"]
    for entry in f.forecasts:
        half = entry["fractions"]["0.5"]
        parts.append(f"| {entry['rule']} | {error_text(half)} (n={half['n']}) | {half['no_forecast']} of "
                     f"{half['n']} | {half['coverage']} |")
    twice = shared.twice_now_at_half(runs)
    parts.append(f"| twice the current step | {error_text(twice)} (n={twice['n']}) | {twice['no_forecast']} of "
                 f"{twice['n']} | - |")
    parts += ["", "## Targets, as registered", "",
              "Judged as registered (directions as registered): a target registered as a point comparison is met "
              "where the point says so, never re-graded; beside it, whether a paired bootstrap interval of the "
              "difference on the same runs shows it.", ""]
    parts += [f"- {text}" for text, _ in targets(f) if text]
    parts += ["", *shared.provenance_section(FOLDER / "heldout", heldout), "<!-- end generated -->"]
    return "\n".join(parts)


def cell(found: Mapping[str, Any], share: float, name: str) -> str:
    """A pooled AUROC with its interval, without its n (the README gives the groups once)."""
    value = shared.pooled(found, share).get(name)
    return "-" if value is None or value.value is None else f"{value.value:.2f} [{value.low:.2f}, {value.high:.2f}]"


def readme_line() -> str:
    """The README's line on who will learn, from the same figures as the page."""
    f = figures()
    made, registered = len(f.heldout), len(jobs("heldout"))
    partial = "" if made >= registered else f" (partial: {made} of {registered} registered runs made so far)"
    settings = next(row for row in f.settings if row["share"] == QUARTER)
    return (f"**Who will learn** ([docs/who-learns.md](docs/who-learns.md)). {made} registered held-out runs of "
            f"capgeo's own tasks{partial}, some made to fail by their settings (a budget too short, a learning rate "
            f"too low). At a quarter of the budget ({shared.left_out_words(f.runs, QUARTER)}) the probability of "
            "acquisition (it reads the accuracy, the loss and the weight norm, no geometry) separates the runs that "
            f"will acquire from those that will not with AUROC {cell(f.registered, QUARTER, OURS)}; the accuracy "
            f"alone: {cell(f.registered, QUARTER, 'acc')}, the validation loss: "
            f"{cell(f.registered, QUARTER, 'val/loss')}, the weight norm: "
            f"{cell(f.registered, QUARTER, 'weight_norm/global')}; the runs' settings alone (task, learning rate and "
            f"budget; exploratory, added after the registration): {settings['auroc'].value:.2f} "
            f"[{settings['auroc'].low:.2f}, {settings['auroc'].high:.2f}], the probability "
            f"{shared.shown(settings['difference']).replace(':', ' than them:')}. "
            + shared.beaten_sentence(shared.beaten_by(f.registered, QUARTER, OURS),
                                     shared.beaten_by(f.strict, QUARTER, OURS)) + ". Beside it, "
            + shared.leads_clause(f.leads, "docs/who-learns.md") + ".")


def targets_line() -> str:
    """The README's line on the registered targets of who will learn: each met or missed, with its figure."""
    clauses = [clause for _, clause in targets(figures()) if clause]
    return ("**Who will learn, the registered targets** ([as registered](docs/who-learns.md#targets-as-registered)): "
            + "; ".join(clauses) + ".")


def write_report() -> str:
    text = page()
    DOC.write_text(text + "\n")
    return text


__all__ = ["REGISTRATION", "figures", "page", "readme_line", "targets_line", "write_report"]


def main(argv: Sequence[str] | None = None) -> None:
    page_command("who_learns_report", "docs/who-learns.md", write_report, readme_line, argv,
                 {"targets": targets_line})


if __name__ == "__main__":
    main()
