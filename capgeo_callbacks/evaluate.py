r"""What the warning is worth
========================

Scores alert rules as alarms on a folder of finished runs, the user's own included::

    python -m capgeo_callbacks.evaluate RUNS_DIR --select-seeds 0 1 --holdout-seeds 2

Each run's summary holds its series (accuracy, RankMe per layer, log-prob, probe accuracy), so any rule can
be replayed on it offline with the same code that raises alerts live. Per rule: precision (alerted runs
that were later acquired within the budget, over alerted runs), recall (acquired runs alerted before
acquisition, over acquired runs), lead before acquisition (steps, and as a fraction of the steps to
acquisition), lead over learning onset, and the false-alarm rate on runs never acquired and on negative
controls, each with n and a Wilson 95% interval. Baselines are scored the same way: an onset rule on the
loss alone, log-prob emergence, a probe crossing, a fixed clock. Candidate RankMe rules are chosen on the
selection seeds and reported on the held-out seeds; definitions in docs/design.md, "The warning's record".
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from capgeo_callbacks.detection import (
    DetectionSettings,
    align,
    detect_acquisition,
    detect_logprob_emergence,
    replay_alerts,
    split_points,
)
from capgeo_callbacks.detection.events import noise_scale
from capgeo_callbacks.runs import RunRecord, find_runs
from capgeo_callbacks.stats import wilson
from capgeo_callbacks.summary import layer_names

__all__ = ["RULES", "Rule", "RunSeries", "candidate_rules", "learning_onset", "score", "wilson"]

LOGPROB_TAGS = ("val/logprob", "logprob", "probe_set/logprob")
ONSET_FRACTION = 0.10  # of the way from the post-warm-up plateau to the best log-prob
MIN_LEARNING = 0.05  # nats: less rise than this over a run is no learning at all
NO_WARMUP = 0  # steps: a run whose summary records no ``warmup_steps`` is taken to have had no warm-up


# ------------------------------------------------------------------------------------------------ runs


@dataclass(frozen=True)
class RunSeries:
    """One run's series on its evaluation steps, and what it is labelled.

    Attributes:
        name: the run folder.
        info: task, difficulty, size, seed, max_steps (whatever the summary records).
        steps: the evaluation steps (those of the accuracy series).
        acc: accuracy at each step.
        rankme: per layer, in depth order, RankMe at each step (NaN where not measured).
        logprob: mean answer log-prob at each step, or None.
        probes: per layer, probe accuracy at each step.
        negative_control: whether the run is a named negative control (a level no size learns, or shuffled
            answers): an alert on it is a false alarm by construction.
    """

    name: str
    info: Mapping[str, Any]
    steps: list[int]
    acc: list[float]
    rankme: dict[str, list[float]]
    logprob: list[float] | None
    probes: dict[str, list[float]] = field(default_factory=dict)
    negative_control: bool = False

    @property
    def seed(self) -> int | None:
        seed = self.info.get("seed")
        return None if seed is None else int(seed)

    @property
    def max_steps(self) -> int:
        return int(self.info.get("max_steps") or (self.steps[-1] if self.steps else 0))

    @property
    def warmup_steps(self) -> int | None:
        """The learning-rate warm-up the run's summary records (``warmup_steps``), or None."""
        value = self.info.get("warmup_steps")
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @property
    def guard(self) -> int:
        """Where the log-prob plateau is read from: the end of the recorded warm-up, else step 0 (:data:`NO_WARMUP`)."""
        return NO_WARMUP if self.warmup_steps is None else self.warmup_steps

    def acquisition(self, settings: DetectionSettings) -> int | None:
        return detect_acquisition(self.steps, self.acc, settings.threshold, settings.patience)


def run_series(record: RunRecord) -> RunSeries | None:
    """A run's series from its summary (None if it has no accuracy series)."""
    summary = record.summary
    series = summary.get("series") or {}
    acc_points = [p for p in series.get("acc", []) if p[1] is not None]
    if len(acc_points) < 2:
        return None
    steps, acc = split_points(acc_points)
    rankme = {name: align(_finite(series.get(f"rankme/{name}", [])), steps) for name in layer_names(summary)}
    probes = {tag.split("/", 1)[1]: align(_finite(points), steps) for tag, points in series.items()
              if tag.startswith("probe_acc/")}
    logprob_tag = next((tag for tag in LOGPROB_TAGS if tag in series), None)
    logprob = align(_finite(series[logprob_tag]), steps) if logprob_tag else None
    info = {key: summary.get(key) for key in ("task", "difficulty", "size", "seed", "max_steps", "warmup_steps")}
    control = bool(summary.get("negative_control")) or bool(summary.get("shuffled_answers"))
    return RunSeries(record.name, info, steps, acc, rankme, logprob, probes, control)


def _finite(points: Iterable[Sequence[Any]]) -> list[list[float]]:
    return [[p[0], p[1]] for p in points if p[1] is not None and math.isfinite(p[1])]


def load_runs(runs_dir: str | Path) -> list[RunSeries]:
    """Every run under ``runs_dir`` with an accuracy series."""
    return [run for run in (run_series(record) for record in find_runs(runs_dir)) if run is not None]


# ------------------------------------------------------------------------------------------- onsets


def learning_onset(steps: Sequence[int], logprob: Sequence[float] | None, guard: int = NO_WARMUP) -> int | None:
    """The evaluation at which the answer's log-prob leaves its plateau (a label, computed on the whole run).

    ``guard`` is the run's learning-rate warm-up (:attr:`RunSeries.guard`). Plateau P: the median log-prob over
    the evaluations in [guard, 2 guard] (after the warm-up, where a
    model that has not learned predicts the answer tokens' marginal); best B: the highest log-prob (3-point
    smoothed). Onset: the first evaluation at or after ``guard`` where the log-prob reaches
    P + 0.10 (B - P). None without a log-prob series, or when B - P is under 0.05 nats (nothing learned).
    """
    if logprob is None:
        return None
    points = [(s, v) for s, v in zip(steps, logprob, strict=True) if math.isfinite(v) and s >= guard]
    if len(points) < 3:
        return None
    window = [v for s, v in points if s <= 2 * guard] or [points[0][1]]
    plateau = statistics.median(window)
    values = np.array([v for _, v in points])
    smooth = np.convolve(values, np.ones(3) / 3, mode="same")
    smooth[0], smooth[-1] = values[0], values[-1]
    best = float(smooth.max())
    if best - plateau < MIN_LEARNING:
        return None
    level = plateau + ONSET_FRACTION * (best - plateau)
    return next(s for s, v in points if v >= level)


def loss_onset_alert(steps: Sequence[int], logprob: Sequence[float] | None, guard: int = NO_WARMUP,
                     units: float = 3.0, confirm: int = 2) -> int | None:
    """The loss-only baseline, live: the first evaluation after the plateau window [guard, 2 guard] at which
    the log-prob has stayed above the plateau's median by ``units`` of the plateau's own noise (at least
    0.05 nats) for ``confirm`` evaluations. Uses only the log-prob seen so far."""
    if logprob is None:
        return None
    points = [(s, v) for s, v in zip(steps, logprob, strict=True) if math.isfinite(v) and s >= guard]
    window = [v for s, v in points if s <= 2 * guard]
    if len(window) < 2:
        window = [v for _, v in points[:3]]
    if not window:
        return None
    plateau = statistics.median(window)
    level = plateau + max(units * noise_scale(np.array(window)), MIN_LEARNING)
    after = [(s, v) for s, v in points if s > 2 * guard or len(window) < 2]
    run = 0
    for s, v in after:
        run = run + 1 if v >= level else 0
        if run == confirm:
            return s
    return None


# ------------------------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Rule:
    """An alert rule: when, if ever, it would have warned on a run.

    Attributes:
        name: how tables name it.
        kind: ``rankme`` (the precursor detector with ``settings``), ``loss`` (:func:`loss_onset_alert`),
            ``logprob`` (log-prob emergence), ``probe`` (any layer's probe accuracy reaching the acquisition
            threshold), ``clock`` (at ``clock`` x the budget, whatever happens), ``warmup`` (at the end of the
            learning-rate warm-up, whatever happens: the study's rule alerting on the warm-up's dip is this).
        settings: detection settings (``rankme``; also the acquisition threshold for every kind).
        clock: the fraction of the budget of the clock rule.
    """

    name: str
    kind: str = "rankme"
    settings: DetectionSettings = field(default_factory=DetectionSettings)
    clock: float = 0.2

    def alert_step(self, run: RunSeries) -> int | None:
        """The step of this rule's first alert on ``run`` (None: no alert)."""
        if self.kind == "rankme":
            alerts = replay_alerts(run.steps, run.acc, run.rankme, self.settings)
            return next((a.step for a in alerts if a.kind == "run"), None)
        if self.kind == "loss":
            return loss_onset_alert(run.steps, run.logprob, self.settings.guard_steps or run.guard)
        if self.kind == "logprob":
            if run.logprob is None:
                return None
            found = detect_logprob_emergence(run.steps, run.logprob, threshold=self.settings.logprob_threshold)
            return None if found is None else found.step
        if self.kind == "probe":
            crossings = [next((s for s, v in zip(run.steps, values, strict=True) if v >= self.settings.threshold),
                              None) for values in run.probes.values()]
            found = [s for s in crossings if s is not None]
            return min(found) if found else None
        if self.kind == "clock":
            return next((s for s in run.steps if s >= self.clock * run.max_steps), None)
        if self.kind == "warmup":  # a run that records no warm-up has no end of one to ring at
            end = run.warmup_steps
            return None if end is None else next((s for s in run.steps if s >= end), None)
        raise ValueError(f"unknown rule kind {self.kind!r}; valid: rankme, loss, logprob, probe, clock, warmup")


BASELINES = (
    Rule("loss onset (baseline)", "loss"),
    Rule("log-prob emergence (baseline)", "logprob"),
    Rule("probe crossing (baseline)", "probe"),
    Rule("clock at 20% (baseline)", "clock", clock=0.2),
    Rule("clock at warm-up end (baseline)", "warmup"),
)
RULES: dict[str, DetectionSettings] = {"study": DetectionSettings()}
"""Named RankMe rules: ``study`` is the study's rule (the default)."""


def candidate_rules() -> list[Rule]:
    """The RankMe rules to choose among: the study's, and its variants with a warm-up guard, a noise scale,
    an absolute recovery, the deepest layer only, or two layers required."""
    rules = [Rule("study")]
    grid = itertools.product((0, 100, 200), (0.0, 3.0, 6.0), (0.0, 1.0), ("any", "deepest"), (1, 2))
    for guard, noise, recovery, layers, required in grid:
        if layers == "deepest" and required > 1:
            continue
        if (guard, noise, recovery, layers, required) == (0, 0.0, 0.0, "any", 1):
            continue
        settings = DetectionSettings(guard_steps=guard, noise_units=noise, min_recovery=recovery,
                                     alert_layers=layers, layers_required=required)
        rules.append(Rule(rule_name(settings), settings=settings))
    return rules


def rule_name(settings: DetectionSettings) -> str:
    """A short name for a RankMe rule's non-default parts."""
    parts = []
    if settings.guard_steps:
        parts.append(f"guard {settings.guard_steps}")
    if settings.noise_units:
        parts.append(f"noise x{settings.noise_units:g}")
    if settings.min_recovery:
        parts.append(f"rise >= {settings.min_recovery:g}")
    if settings.alert_layers != "any":
        parts.append(f"{settings.alert_layers} layer")
    if settings.layers_required > 1:
        parts.append(f"{settings.layers_required} layers")
    return ", ".join(parts) or "study"


# ------------------------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class Rate:
    """k of n, with its Wilson 95% interval."""

    k: int
    n: int

    @property
    def value(self) -> float | None:
        return self.k / self.n if self.n else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson(self.k, self.n)

    def __str__(self) -> str:
        if not self.n:
            return "— (n 0)"
        low, high = self.interval  # type: ignore[misc]
        return f"{self.k}/{self.n} = {self.k / self.n:.2f} [{low:.2f}, {high:.2f}]"


@dataclass(frozen=True)
class Outcome:
    """One run under one rule."""

    run: str
    alert: int | None  # the alert step, if raised before acquisition
    acquisition: int | None
    onset: int | None
    control: bool


def outcomes(rule: Rule, runs: Sequence[RunSeries]) -> list[Outcome]:
    """Each run's alert (only one raised before acquisition counts: after it, it warns of nothing)."""
    found = []
    for run in runs:
        acquisition = run.acquisition(rule.settings)
        alert = rule.alert_step(run)
        if alert is not None and acquisition is not None and alert >= acquisition:
            alert = None
        onset = learning_onset(run.steps, run.logprob, run.guard)  # a label: the same for every rule
        found.append(Outcome(run.name, alert, acquisition, onset, run.negative_control))
    return found


def score(rule: Rule, runs: Sequence[RunSeries]) -> dict[str, Any]:
    """Precision, recall, leads and false-alarm rates of ``rule`` on ``runs`` (see the module docstring)."""
    found = outcomes(rule, runs)
    alerted = [o for o in found if o.alert is not None]
    acquired = [o for o in found if o.acquisition is not None]
    never = [o for o in found if o.acquisition is None and not o.control]
    controls = [o for o in found if o.control]
    hits = [o for o in acquired if o.alert is not None]
    leads = [o.acquisition - o.alert for o in hits]  # type: ignore[operator]
    fractions = [(o.acquisition - o.alert) / o.acquisition for o in hits if o.acquisition]  # type: ignore[operator]
    onset_leads = [o.onset - o.alert for o in hits if o.onset is not None]  # type: ignore[operator]
    precision, recall = Rate(len(hits), len(alerted)), Rate(len(hits), len(acquired))
    return {
        "rule": rule.name,
        "runs": len(found),
        "precision": precision,
        "recall": recall,
        "f1": _f1(precision.value, recall.value),
        "lead": _spread(leads),
        "lead_fraction": _spread(fractions),
        "lead_over_onset": _spread(onset_leads),
        "false_alarms_never_acquired": Rate(sum(o.alert is not None for o in never), len(never)),
        "false_alarms_controls": Rate(sum(o.alert is not None for o in controls), len(controls)),
        "outcomes": found,
    }


def _f1(precision: float | None, recall: float | None) -> float | None:
    if not precision or not recall:
        return 0.0 if precision is not None and recall is not None else None
    return 2 * precision * recall / (precision + recall)


def _spread(values: Sequence[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "median": None, "q25": None, "q75": None}
    q25, median, q75 = np.percentile(values, [25, 50, 75]).tolist()
    return {"n": len(values), "median": median, "q25": q25, "q75": q75}


def choose(rules: Sequence[Rule], runs: Sequence[RunSeries]) -> tuple[Rule, list[dict[str, Any]]]:
    """The rule with the best F1 on ``runs`` (ties: higher precision, then the first listed), and every score."""
    scores = [score(rule, runs) for rule in rules]
    best = max(range(len(rules)), key=lambda i: (scores[i]["f1"] or 0.0, scores[i]["precision"].value or 0.0, -i))
    return rules[best], scores


def wins(candidate: Mapping[str, Any], reference: Mapping[str, Any]) -> bool:
    """Whether a rule is better than another on the same runs: higher F1 and precision not lower."""
    f1, reference_f1 = candidate["f1"] or 0.0, reference["f1"] or 0.0
    precision, reference_precision = candidate["precision"].value or 0.0, reference["precision"].value or 0.0
    return f1 > reference_f1 and precision >= reference_precision


# ------------------------------------------------------------------------------------------- report


def evaluate(runs: Sequence[RunSeries], select_seeds: Sequence[int], holdout_seeds: Sequence[int],
             rules: Sequence[Rule] | None = None, difficulties: Sequence[str] | None = None) -> dict[str, Any]:
    """Choose a RankMe rule on the selection seeds and score it, the study's rule and the baselines on the
    held-out seeds (and on all runs)."""
    chosen_from = list(rules or candidate_rules())
    if difficulties:
        runs = [run for run in runs if run.info.get("difficulty") in difficulties]
    selection = [run for run in runs if run.seed in select_seeds]
    holdout = [run for run in runs if run.seed in holdout_seeds]
    chosen, selection_scores = choose(chosen_from, selection) if selection else (chosen_from[0], [])
    study = next(rule for rule in chosen_from if rule.name == "study")
    reported = [study, *([chosen] if chosen.name != "study" else []), *BASELINES]
    held = [score(rule, holdout) for rule in reported]
    return {
        "select_seeds": list(select_seeds), "holdout_seeds": list(holdout_seeds),
        "runs": {"all": len(runs), "selection": len(selection), "holdout": len(holdout)},
        "chosen": chosen.name, "chosen_settings": chosen.settings.to_dict(),
        "chosen_wins_on_holdout": bool(held) and chosen.name != "study" and wins(held[1], held[0]),
        "selection": sorted(selection_scores, key=lambda s: -(s["f1"] or 0.0))[:10],
        "holdout": held,
        "all_runs": [score(rule, runs) for rule in reported],
    }


TABLE_HEADER = ("| rule | precision | recall | lead, steps (median [IQR], n) | lead / steps to acquisition | "
                "lead over onset, steps | false alarms, never acquired | false alarms, controls |")


def table(scores: Sequence[Mapping[str, Any]]) -> str:
    """The scores as a Markdown table."""
    lines = [TABLE_HEADER, "|" + " --- |" * 8]
    for s in scores:
        lines.append(f"| {s['rule']} | {s['precision']} | {s['recall']} | {_cell(s['lead'], 0)} | "
                     f"{_cell(s['lead_fraction'], 2)} | {_cell(s['lead_over_onset'], 0)} | "
                     f"{s['false_alarms_never_acquired']} | {s['false_alarms_controls']} |")
    return "\n".join(lines)


def _cell(spread: Mapping[str, Any], digits: int) -> str:
    if not spread["n"]:
        return "— (n 0)"
    return f"{spread['median']:.{digits}f} [{spread['q25']:.{digits}f}, {spread['q75']:.{digits}f}] (n {spread['n']})"


def render(result: Mapping[str, Any], command: str) -> str:
    """The evaluation as Markdown."""
    runs = result["runs"]
    lines = [
        "# What the warning is worth", "", f"`{command}`", "",
        f"Runs: {runs['all']} in all; rules chosen on seeds {result['select_seeds']} ({runs['selection']} runs), "
        f"reported on held-out seeds {result['holdout_seeds']} ({runs['holdout']} runs). Rates are k/n with a "
        "Wilson 95% interval; an alert counts only if raised before acquisition.", "",
        f"Chosen on the selection seeds: **{result['chosen']}**; better than the study's rule on the held-out "
        f"seeds (higher F1, precision not lower): **{'yes' if result['chosen_wins_on_holdout'] else 'no'}**.", "",
        "## Held-out seeds", "", table(result["holdout"]), "",
        "## All runs (selection and held-out seeds together)", "", table(result["all_runs"]), "",
        "## Selection seeds: the best candidates", "", table(result["selection"]), "",
    ]
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Rate):
        return {"k": value.k, "n": value.n, "value": value.value, "interval": value.interval}
    if isinstance(value, Outcome):
        return value.__dict__
    if isinstance(value, Mapping):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    return value


def main(argv: Sequence[str] | None = None, out: Callable[[str], Any] = print) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m capgeo_callbacks.evaluate", description=__doc__.split("\n")[3])
    parser.add_argument("runs_dir", help="a folder of runs (each with capgeo_summary.json)")
    parser.add_argument("--select-seeds", type=int, nargs="+", default=[0, 1], help="seeds the rule is chosen on")
    parser.add_argument("--holdout-seeds", type=int, nargs="+", default=[2], help="seeds it is reported on")
    parser.add_argument("--difficulties", nargs="+", help="only runs at these difficulties")
    parser.add_argument("--out", help="write evaluation.md and evaluation.json into this folder")
    args = parser.parse_args(argv)
    overlap = set(args.select_seeds) & set(args.holdout_seeds)
    if overlap:
        parser.error(f"seeds {sorted(overlap)} are both selection and held-out seeds; they must be disjoint")
    try:
        runs = load_runs(args.runs_dir)
    except FileNotFoundError as err:
        parser.error(str(err))
    result = evaluate(runs, args.select_seeds, args.holdout_seeds, difficulties=args.difficulties)
    command = "python -m capgeo_callbacks.evaluate " + " ".join(sys.argv[1:] if argv is None else argv)
    text = render(result, command)
    out(text)
    if args.out:
        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "evaluation.md").write_text(text)
        (folder / "evaluation.json").write_text(json.dumps(_jsonable(result), indent=1))
    return result


if __name__ == "__main__":
    main()
