"""What both registered pages (docs/who-learns.md, docs/grokking.md) say the same way: the runs each commit added,
every baseline beside the probability (with paired intervals where a target compares two figures), the runs'
settings alone, the forecast at shares of the budget, the alert's operating point, and every rule's lead at a capped
false-alarm rate.

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

from capgeo_callbacks.keys import ILDR, PROBE_ACC, RANKME
from capgeo_callbacks.rules import Rule, RunView, SurvivalForecaster
from capgeo_callbacks.scoring import ScoredRun
from capgeo_callbacks.scoring.discrimination import BASELINE, auroc, population, series_scores
from capgeo_callbacks.scoring.leads import GRIDS, MAX_CONTROL_RATE, MAX_FALSE_RATE, RuleGrid, RuleLead, leads_table
from capgeo_callbacks.scoring.leads import rule_leads as library_rule_leads
from capgeo_callbacks.scoring.operating import (
    Predictor,
    budget_forecasts,
    choose_operating_point,
    fired_at,
    score_path,
    twice_now,
)
from capgeo_callbacks.scoring.paired import Difference, paired_difference
from capgeo_callbacks.scoring.scores import bootstrap_median, error_text, warning_scores, warning_table
from study.checkout import ROOT, history_paths

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
                          *history_paths(folder)], cwd=ROOT, capture_output=True, text=True, check=False,
                         timeout=60).stdout  # newest first: a run's first commit, under its former path, is read last
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


def beaten_sentence(registered: Sequence[str], strict: Sequence[str]) -> str:
    """The README's words for :func:`beaten_by`'s lists: with the directions fixed as registered first, then with
    the stricter rule."""
    def listed(better: Sequence[str]) -> str:
        return f"{len(better)} single series" + (" (" + "; ".join(better) + ")" if better else "")

    if not registered and not strict:
        return "No single series ties or beats it, with directions as registered or by the stricter rule"
    return (f"Tied or beaten, with directions fixed as registered (calibration's side of 0.5), by {listed(registered)}"
            f"; by the stricter rule (a direction only where calibration's interval excludes 0.5), by "
            f"{listed(strict)}")


def left_out_words(runs: Sequence[ScoredRun], share: float, verb: tuple[str, str] = ("acquire", "acquired")) -> str:
    """Why the runs not counted at ``share`` of the budget are left out, so that the counts add up to the runs
    (``verb``: the event's words, present and past)."""
    kept, left = population(runs, share)
    controls = sum(run.control for run in runs)
    done = sum(1 for run in runs if not run.control and run.acquisition is not None and run.view.max_steps
               and run.acquisition <= share * run.view.max_steps)
    parts = [f"{controls} shuffled-answer control{'' if controls == 1 else 's'}" if controls else "",
             f"{done} already {verb[1]} by then" if done else "",
             *(f"{n} {reason}" for reason, n in left.items())]
    positives = sum(positive for *_, positive in kept)
    listed = ", ".join(part for part in parts if part)
    return (f"{positives} runs that {verb[0]} later vs {len(kept) - positives} that never do"
            + (f"; left out of the {len(runs)}: {listed}" if listed else f", all {len(runs)}"))


def series_value(runs: Sequence[ScoredRun], name: str, direction: int | None = 1
                 ) -> Callable[[ScoredRun, int], float]:
    """A single series' score by its row name in the AUROC table (a series, its drop or slope), at a run's first
    ``end`` evaluations, signed by ``direction``."""
    score = next(score for score in series_scores(runs) if score.name == name)
    sign = direction or 1

    def value(run: ScoredRun, end: int) -> float:
        return sign * score.value(run, run.view.prefix(end))
    return value


def paired_auroc(runs: Sequence[ScoredRun], share: float, first: Callable[[ScoredRun, int], float],
                 second: Callable[[ScoredRun, int], float]) -> Difference:
    """``first``'s AUROC minus ``second``'s on the same runs at ``share`` of the budget (those not yet acquired; runs
    where either has no value left out), with a paired bootstrap interval (:func:`paired_difference`)."""
    kept, _ = population(runs, share)
    rows = [(first(run, end), second(run, end), positive) for run, end, positive in kept]
    rows = [row for row in rows if not (math.isnan(row[0]) or math.isnan(row[1]))]
    return paired_difference([float(p) for *_, p in rows], [a for a, _, _ in rows], [b for _, b, _ in rows],
                             "auroc")


def difference_text(found: Difference) -> str:
    """'+0.009 [-0.087, +0.096]' (three places, as the paired bootstrap gives it), or '-' without a figure."""
    if found.value is None or found.low is None or found.high is None:
        return "-"
    return f"{found.value:+.3f} [{found.low:+.3f}, {found.high:+.3f}]"


def shown(found: Difference, lower_is_better: bool = False) -> str:
    """Whether a paired difference (first minus second) shows the first better: its interval on one side of 0."""
    if found.value is None or found.low is None or found.high is None:
        return "no paired figure"
    better, worse = (found.high < 0, found.low > 0) if lower_is_better else (found.low > 0, found.high < 0)
    verdict = "shown better" if better else "shown worse" if worse else "not shown better"
    return f"{verdict}: {difference_text(found)}"


def paired_clause(compared: Sequence[tuple[str, Difference]], lower_is_better: bool = False) -> str:
    """Which of several paired differences (ours minus each named baseline's) show ours better, in one clause:
    'a paired interval shows it over acc (+0.153 [...]), not over val/loss (+0.009 [...])'."""
    over = [(name, found) for name, found in compared if shown(found, lower_is_better).startswith("shown better")]
    not_over = [(name, found) for name, found in compared if (name, found) not in over]

    def listed(items: Sequence[tuple[str, Difference]]) -> str:
        return joined([f"{name} ({difference_text(found)})" for name, found in items], "or")

    if not over:
        return f"no paired interval shows it over {listed(not_over)}"
    return f"a paired interval shows it over {listed(over)}" + (f", not over {listed(not_over)}" if not_over else "")


def joined(items: Sequence[str], word: str = "and") -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {word} {items[-1]}" if items else ""


def verdicts_clause(verdicts: Sequence[tuple[str, str]]) -> str:
    """Verdicts on several baselines, grouped: 'met as registered (acc 0.73, val/loss 0.87)'."""
    grouped: dict[str, list[str]] = {}
    for verdict, named in verdicts:
        grouped.setdefault(verdict, []).append(named)
    return "; ".join(f"{verdict} ({', '.join(names)})" for verdict, names in grouped.items())


def closest_series(found: Mapping[str, Any], share: float) -> dict[str, Any] | None:
    """The single series (a recorded series, its drop or slope: no warning, forecast or constant) with the highest
    pooled AUROC at ``share``, its row in ``found``."""
    rows = [row for row in found[f"{share:g}"]["rows"] if row["name"] != BASELINE
            and not row["name"].startswith(("warning: ", "forecast: ")) and row["cells"]["pooled"].value is not None]
    return max(rows, key=lambda row: row["cells"]["pooled"].value, default=None)


def share_line(found: Mapping[str, Any], runs: Sequence[ScoredRun], share: float, ours: str,
               probability: Callable[[ScoredRun, int], float], left_out: str) -> str:
    """One bullet of a registered page: the probability's pooled AUROC at ``share`` (``left_out``: which runs that
    share leaves out), the single series that tie or beat it, and its paired difference from the closest one."""
    better = beaten_by(found, share, ours)
    closest = closest_series(found, share)
    paired = "" if closest is None else (
        f" The closest single series, {closest['name']} ({closest['cells']['pooled'].value:.2f}): the "
        "probability's AUROC minus that series', paired: "
        + shown(paired_auroc(runs, share, probability, series_value(runs, closest["name"], closest["direction"])))
        + ".")
    return (f"- At {share:.0%} of the budget ({left_out}) the probability's pooled AUROC is "
            f"{pooled(found, share).get(ours)}; "
            + ("tied or beaten by: " + "; ".join(better) + "." if better else "no single series ties or beats it.")
            + paired)


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


# ------------------------------------------------------------------------------------------- every rule's lead

REGISTERED = "registered: "  # how the leads table names a registered warning, apart from its grid's row
LEADS_TITLE = "Every rule's lead at a capped false-alarm rate (exploratory, added after the registration)"
LEADS_ANCHOR = "every-rules-lead-at-a-capped-false-alarm-rate-exploratory-added-after-the-registration"


def registered_grid(rule: Rule, role: str = "") -> RuleGrid:
    """A registered warning exactly as registered (one point), named apart from its grid's row: ``registered:
    probe-crossing`` (``role``: ``comparator`` for a registered comparator); geometric where it reads RankMe, a probe
    or ILDR."""
    geometric = any(key.startswith((RANKME, PROBE_ACC, ILDR)) for key in rule.needs.series)
    return RuleGrid.fixed(rule, geometric, name=f"registered{f' {role}' if role else ''}: {rule.name}")


def every_rule_lead(registered: Sequence[RuleGrid], calibration: Sequence[ScoredRun], heldout: Sequence[ScoredRun]
                    ) -> list[RuleLead]:
    """The registered warnings as registered, then every rule of the library with its grid
    (:data:`~capgeo_callbacks.scoring.leads.GRIDS`), each at its operating point chosen on ``calibration`` alone
    (:func:`~capgeo_callbacks.scoring.leads.rule_leads`), and what it does on ``heldout``."""
    return library_rule_leads([*registered, *GRIDS.values()], calibration, heldout)


def is_registered(lead: RuleLead) -> bool:
    return lead.rule.startswith("registered")


def leads_section(leads: Sequence[RuleLead], calibration: Sequence[ScoredRun], verb: tuple[str, str] = ("acquire",
                  "acquisition")) -> list[str]:
    """The page's section on every rule's lead at a capped false-alarm rate (exploratory: added after the
    registration); ``verb``: the event's words (the verb, the noun)."""
    acquirers = sum(not run.control and run.acquisition is not None for run in calibration)
    never = sum(not run.control and run.acquisition is None for run in calibration)
    controls = sum(run.control for run in calibration)
    registered = [lead.rule.split(": ", 1)[1] for lead in leads if is_registered(lead)]
    return [f"## {LEADS_TITLE}", "",
            "How early each rule warns, and how often it rings on runs that never "
            f"{verb[0]}, once its settings are chosen on the calibration runs alone. Not registered: added after the "
            "registration, so exploratory. "
            + (f"The registered warning comes first, exactly as registered (`{registered[0]}`, one point)"
               if len(registered) == 1 else "The registered warnings come first, exactly as registered ("
               + joined([f"`{name}`" for name in registered]) + ", each one point)")
            + "; then every rule of the library with "
            "a small grid of its settings (`capgeo_callbacks.scoring.leads.GRIDS`), its operating point chosen on the "
            f"{len(calibration)} calibration runs ({acquirers} that {verb[0]}, {never} that never do, {controls} "
            f"controls): the point that warns the most calibration runs before their {verb[1]}, while at most "
            f"{MAX_FALSE_RATE:.0%} of the calibration runs that never {verb[0]} (the cap) and "
            + ("no calibration control" if MAX_CONTROL_RATE == 0 else f"at most {MAX_CONTROL_RATE:.0%} of the "
               "calibration controls") + " alert at any step; ties go to the fewer false alarms, then the earlier "
            "warning. Where no point stays within the cap, the row says so and shows the rule at its default; a rule "
            "whose series the runs do not record is said not measured. Held out, at that point: the runs that "
            f"{verb[0]} warned before their {verb[1]} (k of n), the median lead in steps and as a share of the time to "
            f"{verb[1]} over the warned runs with a bootstrap 95% interval, the false alarms realised on the runs that "
            f"never {verb[0]}, and the controls alerting. The probability's alert is the section above. `capgeo score "
            "RUNS --calibration CALIBRATION` makes the same table on any runs.", "",
            leads_table(leads), ""]


def leads_clause(leads: Sequence[RuleLead], page: str, verb: str = "acquire") -> str:
    """The README's clause on every rule's lead, linking the page's table (``page``): how many rules have an operating
    point within the cap, the one that warns the most held-out runs, and the registered warnings beside it."""
    measured = [lead for lead in leads if not is_registered(lead) and lead.calibration.warned.n]
    within = [lead for lead in measured if lead.chosen]
    best = max(within, key=lambda lead: (lead.heldout.warned.value or 0, lead.heldout.lead_share.value or 0),
               default=None)

    def record(lead: RuleLead, short: bool = False) -> str:
        held = lead.heldout
        if short:
            lead_share = "none warned" if held.lead_share.value is None else f"{held.lead_share.value:.2f}"
            return (f"{held.warned.k} of {held.warned.n} ({lead_share}), {held.false_alarms.k} of "
                    f"{held.false_alarms.n}")
        return (f"{held.warned.k} of {held.warned.n} runs that {verb} before they do (median lead "
                f"{fmt(held.lead_share.value)} of the time), with {held.false_alarms.k} of {held.false_alarms.n} that "
                f"never {verb} alerting")

    registered = [f"the {role} `{name}`: {record(lead, short=True)}" for lead in leads if is_registered(lead)
                  for role, name in [lead.rule.split(": ", 1)]]
    return (f"every rule's lead at a capped false-alarm rate ([exploratory]({page}#{LEADS_ANCHOR})): {len(within)} of "
            f"the {len(measured)} rules measured {'has' if len(within) == 1 else 'have'} an operating point chosen on "
            f"calibration runs within the cap (at most {MAX_FALSE_RATE:.0%} of those that never {verb} alerting, no "
            "control)" + ("" if best is None else f"; it is `{best.rule}` ({best.setting}): held out, it warns "
                          if len(within) == 1 else f"; of them, `{best.rule}` ({best.setting}) warns the most: held "
                          "out, ") + ("" if best is None else record(best)) + "; "
            + "; ".join(registered))


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
            "interval": bootstrap_median(errors) if finite else None, "no_forecast": len(errors) - len(finite)}


# ------------------------------------------------------------------------------------------- the settings alone


Settings = Callable[[ScoredRun], dict[str, Any]]  # a run's settings: names to strings (one-hot) or numbers


def settings_model(calibration: Sequence[ScoredRun], settings: Settings) -> Callable[[ScoredRun], float]:
    """A model of the runs' settings alone, of a fixed form: scikit-learn's ``DictVectorizer`` (a string setting
    one-hot, a number as it is), ``StandardScaler`` and ``LogisticRegression`` at its defaults, fitted on the
    non-control calibration runs to "acquired within the budget"; returns each run's probability."""
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    fitted_on = [run for run in calibration if not run.control]
    model = make_pipeline(DictVectorizer(sparse=False), StandardScaler(), LogisticRegression())
    model.fit([settings(run) for run in fitted_on], [run.acquisition is not None for run in fitted_on])

    def value(run: ScoredRun) -> float:
        return float(model.predict_proba([settings(run)])[0, 1])
    return value


def settings_rows(runs: Sequence[ScoredRun], calibration: Sequence[ScoredRun], settings: Settings,
                  probability: Callable[[ScoredRun, int], float], shares: Sequence[float]) -> list[dict[str, Any]]:
    """At each share of the budget: the AUROC [95%] of :func:`settings_model` on the held-out runs not yet acquired
    (its interval from :func:`~capgeo_callbacks.scoring.discrimination.auroc`), and the probability's AUROC minus
    it, paired."""
    model = settings_model(calibration, settings)
    rows = []
    for share in shares:
        kept, _ = population(runs, share)
        values = [(model(run), positive) for run, _, positive in kept]
        found = auroc([v for v, p in values if p], [v for v, p in values if not p])
        difference = paired_auroc(runs, share, probability, lambda run, end: model(run))
        rows.append({"share": share, "auroc": found, "difference": difference})
    return rows


def settings_section(rows: Sequence[Mapping[str, Any]], described: str, fitted_on: int) -> list[str]:
    """The page's section on the runs' settings alone (exploratory: added after the registration)."""
    lines = ["## The runs' settings alone (exploratory, added after the registration)", "",
             "How well the runs' own settings tell them apart, before any is trained: a model of "
             f"{described} alone, of a fixed form (a string setting one-hot, a number as it is, standardised, "
             f"scikit-learn's LogisticRegression at its defaults), fitted on the {fitted_on} non-control calibration "
             "runs to \"acquired within the budget\", scored on the held-out runs not yet acquired at each share of "
             "the budget. Not registered: added after the registration, so exploratory. The last column is the "
             "probability's AUROC minus the settings' on the same runs, with a paired bootstrap interval: where it "
             "holds 0, the probability is not shown better than its own settings.", "",
             "| share | the settings alone: AUROC [95%] | the probability minus the settings, paired [95%] |",
             "| --- | --- | --- |"]
    lines += [f"| {row['share']:.0%} | {row['auroc']} | {shown(row['difference'])} (n={row['difference'].n}) |"
              for row in rows]
    return lines


def provenance_section(folder: Path, summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """The page's last section: which commit added which held-out runs, and the code each ran."""
    return ["## Provenance", "", "Which commit added which held-out runs, and the code each ran (the fit's commit):",
            "", commits_table(folder, summaries)]
