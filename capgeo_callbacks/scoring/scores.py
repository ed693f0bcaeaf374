r"""What a warning or a forecast is worth, on any folder of runs
==============================================================

    capgeo score RUNS [RUNS ...] [--rules rankme-recovery loss-onset ...] [--forecasters acc-trend ...]
                 [--calibration FOLDER [--leads RULE ...] [--max-false-rate 0.2] [--max-control-rate 0]]

(``python -m capgeo_callbacks.scoring`` is the same command.)

Every run in RUNS is scored, whatever its seed: which runs a study may report (its held-out policy) is the
study's to decide before it hands them over (capgeo's own: ``study.phases.heldout``).

Every rule is replayed on each run's summary evaluation by evaluation, asked through
:func:`~capgeo_callbacks.rules.rule_output` exactly as it is asked live, on the same clock from step 0. A run's
labels come from its own series (:func:`~capgeo_callbacks.detection.label_run`): acquisition (0.5 held for 3
evaluations), acquired fully, and learning onset (:func:`~capgeo_callbacks.detection.onset.learning_onset`).
Controls are runs with shuffled answers or a named negative control.

Per warning (a rule's first run alert, which counts only before acquisition): precision (warned runs acquired
later within the budget, over warned runs), recall (runs acquired fully that were warned before acquisition, over
runs acquired fully), false alarms on controls and on runs never acquired, lead over acquisition (steps and share
of the time to acquisition) and over learning onset; each rate with n and a Wilson 95% interval. Ties are
reported as ties.

Per forecaster: the median of ``|predicted - actual| / actual`` acquisition step at 10%, 25%, 50% and 75% of
the time to acquisition, with a bootstrap 95% interval over runs; the share of actual steps inside the
forecast interval and the interval's mean width (relative); and on controls and on runs never acquired, each
apart, the share whose last forecast says "not within reach".

Who will learn: the AUROC of every score a run records and of each rule's own score at 10%, 25% and 50% of the
budget, among the runs not yet acquired then, pooled and within each task, beside a score that fires on every run
that learns (:mod:`capgeo_callbacks.scoring.discrimination`; needs scikit-learn, ``capgeo-callbacks[stats]``).

With calibration runs (``--calibration FOLDER``), two things are read off them and never off RUNS: the direction
of the scores that have none a priori (above), and each rule's operating point: a small grid of its settings, one
point chosen where it warns the most calibration acquirers before acquisition while at most ``--max-false-rate``
(default 0.2) of the calibration runs that never acquire and at most ``--max-control-rate`` (default 0: none) of the
calibration controls alert. The leads table then gives, on RUNS at that point, the acquirers warned before
acquisition, the median lead in steps and as a share of the time to acquisition with its interval, the false alarms
on runs that never acquire and the controls alerting (:mod:`capgeo_callbacks.scoring.leads`; ``--leads`` names the
rules, default every rule with a grid).

A run found twice (a deterministic rerun: the same settings, seed and series, :func:`same_run`) counts once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from capgeo_callbacks.detection import Alert, Chance, DetectionSettings, label_run
from capgeo_callbacks.detection.onset import learning_onset
from capgeo_callbacks.detection.stats import wilson
from capgeo_callbacks.publish.text import markdown_row
from capgeo_callbacks.rules import Forecast, Rule, RunView, rule_output
from capgeo_callbacks.run.reading import find_runs

__all__ = ["FRACTIONS", "Rate", "ScoredRun", "distinct", "forecast_scores", "load_runs", "same_run",
           "warning_scores"]

FRACTIONS = (0.1, 0.25, 0.5, 0.75)


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
            return "- (n=0)"
        low, high = self.interval  # type: ignore[misc]
        return f"{self.k}/{self.n} = {self.k / self.n:.2f} [{low:.2f}, {high:.2f}]"


@dataclass(frozen=True)
class ScoredRun:
    """A finished run as the scorer sees it: its series and its labels.

    Attributes:
        name: where it came from (file or folder).
        view: its series (:class:`~capgeo_callbacks.rules.RunView`).
        acquisition: the acquisition step (None: not acquired within the run).
        acquired_fully: whether it was acquired fully.
        onset: the learning-onset step (None: none).
        control: shuffled answers or a named negative control (nothing to acquire).
        summary: the whole summary.
    """

    name: str
    view: RunView
    acquisition: int | None
    acquired_fully: bool
    onset: int | None
    control: bool
    summary: Mapping[str, Any] = field(repr=False)

    @property
    def seed(self) -> int | None:
        seed = self.summary.get("seed")
        return None if seed is None else int(seed)

    @property
    def task(self) -> str:
        return f"{self.summary.get('task')}/{self.summary.get('difficulty')}"

    @property
    def group(self) -> str:
        """The column of the scorer's within-group tables: its task and level."""
        return self.task


def scored_run(summary: Mapping[str, Any], name: str) -> ScoredRun | None:
    """A run's series and labels from its summary (None if it has fewer than two evaluations)."""
    series = summary.get("series") or {}
    acc = [p for p in series.get("acc", []) if p[1] is not None]
    if len(acc) < 2:
        return None
    view = RunView.from_points(acc, series, summary)
    settings = DetectionSettings.from_dict(summary.get("settings") or {})
    chance = Chance.from_dict(summary["chance"]) if summary.get("chance") else None
    labels = label_run(list(view.steps), list(view.values("acc")), settings)
    onset = learning_onset(view.steps, view.values("val/logprob"), chance, view.warmup_steps or 0)
    # a control has nothing to learn: shuffled answers, or a named negative control that stayed at chance (one that
    # partly learned is labelled for what it did)
    at_chance = label_run(list(view.steps), list(view.values("acc")), settings, chance=chance,
                          token_acc=view.values("val/token_acc"), logprob=view.values("val/logprob")).at_chance
    control = bool(summary.get("shuffled_answers") or (summary.get("negative_control") and at_chance))
    return ScoredRun(name, view, labels.acquisition_step, labels.acquired_fully, onset, control, summary)


def load_runs(folder: str | Path, seeds: Sequence[int] | None = None) -> list[ScoredRun]:
    """Every run under ``folder`` (optionally only ``seeds``): :func:`~capgeo_callbacks.run.reading.find_runs`, the
    newest version of each run folder and every packed ``*.json.gz``; none if ``folder`` does not exist."""
    if not Path(folder).is_dir():
        return []
    # in the order of their files (packed ones first), so that bootstrap draws are those of earlier reports
    records = sorted(find_runs(folder), key=lambda record: (record.path.suffix != ".gz", record.path))
    runs = []
    for record in records:
        run = scored_run(record.summary, str(record.path))
        if run is not None and (seeds is None or run.seed in seeds):
            runs.append(run)
    return runs


# what makes two runs the same run, besides their seed and series (a run's settings, as train.py records them)
RUN_SETTINGS = ("task", "difficulty", "size", "seed", "shuffled_answers", "max_steps", "warmup_steps", "lr",
                "lr_schedule", "batch_size", "weight_decay", "task_params")


def same_run(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two summaries record one deterministic run twice: the same settings and seed (:data:`RUN_SETTINGS`)
    and every series both record (the accuracy at least) the same at the same steps, to float32 precision (a
    mean of losses summed in another order differs in its last digits). A run remade with more measures is the
    same run: observing does not change training."""
    if any(a.get(key) != b.get(key) for key in RUN_SETTINGS):
        return False
    series_a, series_b = a.get("series") or {}, b.get("series") or {}
    shared = set(series_a) & set(series_b)
    return "acc" in shared and all(_same_points(series_a[tag], series_b[tag]) for tag in shared)


def _same_points(a: Sequence[Sequence[Any]], b: Sequence[Sequence[Any]]) -> bool:
    def close(x: Any, y: Any) -> bool:
        if x is None or y is None:
            return x is y
        return math.isclose(x, y, rel_tol=1e-6) or (math.isnan(x) and math.isnan(y))

    return len(a) == len(b) and all(p[0] == q[0] and close(p[1], q[1]) for p, q in zip(a, b, strict=True))


Item = TypeVar("Item")


def distinct(items: Sequence[Item], summary: Callable[[Item], Mapping[str, Any]] = lambda item: item.summary
             ) -> tuple[list[Item], list[tuple[Item, Item]]]:
    """``items`` with each deterministic rerun (:func:`same_run`) counted once, the first kept; and the pairs
    (rerun, the run kept) left out."""
    kept: list[Item] = []
    reruns = []
    for item in items:
        twin = next((other for other in kept if same_run(summary(item), summary(other))), None)
        if twin is None:
            kept.append(item)
        else:
            reruns.append((item, twin))
    return kept, reruns


def first_alert(rule: Rule, run: RunView, prefixes: Sequence[RunView] | None = None) -> Alert | None:
    """``rule``'s first run alert on ``run`` (replayed until it fires, :meth:`Rule.first_run_alert`), or None.
    ``prefixes``: the run's views at each evaluation, made once where several rules replay one run."""
    return rule.first_run_alert(run, prefixes)


def first_warning(rule: Rule, run: RunView) -> int | None:
    """The step of ``rule``'s first run alert on ``run``, or None."""
    alert = first_alert(rule, run)
    return None if alert is None else alert.step


def _spread(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "median": None, "q25": None, "q75": None}
    q25, median, q75 = np.percentile(values, [25, 50, 75]).tolist()
    return {"n": len(values), "median": median, "q25": q25, "q75": q75}


def warning_scores(rule: Rule | str, runs: Sequence[ScoredRun], fired: Mapping[str, int | None] | None = None
                   ) -> dict[str, Any]:
    """Precision, recall, false alarms and leads of ``rule``'s warning on ``runs`` (module docstring). ``fired``:
    each run's first alert step when already known (e.g. from cross-validated models); ``rule`` may then be a name."""
    if fired is None:
        if isinstance(rule, str):
            raise ValueError("a rule name alone needs fired=")
        fired = {run.name: first_warning(rule, run.view) for run in runs}
    name = rule if isinstance(rule, str) else rule.name
    # a warning counts only before acquisition: an alert at or after it warned of nothing (docs/design.md)
    alerted = [run for run in runs if fired[run.name] is not None
               and (run.acquisition is None or fired[run.name] < run.acquisition)]  # type: ignore[operator]
    true_alarms = [run for run in alerted if not run.control and run.acquisition is not None]
    full = [run for run in runs if run.acquired_fully and not run.control]
    caught = [run for run in full if fired[run.name] is not None and fired[run.name] < run.acquisition]  # type: ignore
    never = [run for run in runs if run.acquisition is None and not run.control]
    controls = [run for run in runs if run.control]
    leads = [run.acquisition - fired[run.name] for run in caught]  # type: ignore[operator]
    shares = [(run.acquisition - fired[run.name]) / run.acquisition for run in caught]  # type: ignore[operator]
    onset_leads = [run.onset - fired[run.name] for run in caught if run.onset is not None]  # type: ignore[operator]
    precision, recall = Rate(len(true_alarms), len(alerted)), Rate(len(caught), len(full))
    f1 = (2 * precision.value * recall.value / (precision.value + recall.value)
          if precision.value and recall.value else 0.0)
    return {"rule": name, "runs": len(runs), "precision": precision, "recall": recall, "f1": f1,
            "false_alarms_controls": Rate(sum(fired[r.name] is not None for r in controls), len(controls)),
            "false_alarms_never_acquired": Rate(sum(fired[r.name] is not None for r in never), len(never)),
            "lead": _spread(leads), "lead_share": _spread(shares), "lead_over_onset": _spread(onset_leads),
            "fired": dict(fired)}


def _forecast_at(rule: Rule, run: RunView, step: float) -> Forecast | None:
    end = sum(1 for s in run.steps if s <= step)
    if end < 1:
        return None
    _, made = replay_last(rule, run.prefix(end))
    return made


def replay_last(rule: Rule, run: RunView) -> tuple[list, Forecast | None]:
    """The rule's output at the last evaluation of ``run``, as a run records it (its forecasts do not depend on
    earlier alerts)."""
    output = rule_output(rule, run, [])
    return list(output.alerts), output.forecast


def bootstrap_median(values: Sequence[float], draws: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """A percentile bootstrap 95% interval of the median."""
    if not values:
        return None
    data = np.array(values, dtype=float)
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(data, size=(draws, len(data)), replace=True), axis=1)
    with np.errstate(invalid="ignore"):  # numpy interpolates between two infinite medians as NaN: the bound is inf
        low, high = np.quantile(medians, [0.025, 0.975])
    return (math.inf if math.isnan(low) else float(low)), (math.inf if math.isnan(high) else float(high))


def forecast_scores(rule: Rule, runs: Sequence[ScoredRun], fractions: Sequence[float] = FRACTIONS,
                    keep_errors: bool = False) -> dict[str, Any]:
    """Errors, interval coverage and width of ``rule``'s forecasts on ``runs`` (module docstring); with
    ``keep_errors``, each fraction's entry also holds every run's error (``errors``)."""
    acquired = [run for run in runs if run.acquisition is not None and not run.control]
    by_fraction: dict[str, Any] = {}
    for fraction in fractions:
        errors, covered, widths = [], [], []
        for run in acquired:
            made = _forecast_at(rule, run.view, fraction * run.acquisition)  # type: ignore[operator]
            actual = float(run.acquisition)  # type: ignore[arg-type]
            if made is None:
                errors.append(math.inf)
                continue
            errors.append(abs(made.predicted - actual) / actual)
            if made.low is not None and made.high is not None:
                covered.append(made.low <= actual <= made.high)
                widths.append((made.high - made.low) / actual)
        finite = [e for e in errors if math.isfinite(e)]
        by_fraction[f"{fraction:g}"] = {
            "n": len(errors), "median_error": float(np.median(errors)) if errors else None,
            "interval": bootstrap_median(errors) if finite else None, "no_forecast": len(errors) - len(finite),
            "coverage": Rate(sum(covered), len(covered)),
            "mean_width": _mean_width(widths),
            **({"errors": errors} if keep_errors else {})}
    beyond = {}
    for run in runs:
        if run.acquisition is None:
            _, made = replay_last(rule, run.view)
            beyond[run.name] = made is not None and made.predicted is not None and math.isinf(made.predicted)
    controls = [run for run in runs if run.control and run.name in beyond]
    never = [run for run in runs if not run.control and run.name in beyond]
    return {"rule": rule.name, "fractions": by_fraction,
            "controls_beyond": Rate(sum(beyond[run.name] for run in controls), len(controls)),
            "never_acquired_beyond": Rate(sum(beyond[run.name] for run in never), len(never))}


# ------------------------------------------------------------------------------------------- tables


def warning_table(scores: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: one row per rule, best F1 first; rules with equal precision and recall share a rank."""
    ordered = sorted(scores, key=lambda s: (-(s["f1"] or 0.0), -(s["precision"].value or 0.0), s["rule"]))
    lines = [markdown_row(["rank", "rule", "precision", "recall (acquired fully)", "false alarms: controls",
                           "false alarms: never acquired", "lead, steps (median [q25, q75])",
                           "lead, share of time to acquisition", "lead over onset"]),
             markdown_row(["---:"] + ["---"] * 8)]
    rank, previous = 0, None
    for i, s in enumerate(ordered):
        key = (s["precision"].k, s["precision"].n, s["recall"].k, s["recall"].n)
        rank = rank if key == previous else i + 1
        previous = key
        tie = " (tie)" if sum((o["precision"].k, o["precision"].n, o["recall"].k, o["recall"].n) == key
                              for o in ordered) > 1 else ""
        lines.append(markdown_row([f"{rank}{tie}", str(s["rule"]), str(s["precision"]), str(s["recall"]),
                                   str(s["false_alarms_controls"]), str(s["false_alarms_never_acquired"]),
                                   _cell(s["lead"]), _cell(s["lead_share"], 2), _cell(s["lead_over_onset"])]))
    return "\n".join(lines)


def _mean_width(widths: Sequence[float]) -> float | None:
    """The mean relative width of the finite intervals; infinite where every interval is (no upper end); None
    without intervals."""
    finite = [width for width in widths if math.isfinite(width)]
    return float(np.mean(finite)) if finite else (math.inf if widths else None)


def error_text(entry: Mapping[str, Any]) -> str:
    """One fraction's median relative error with its bootstrap interval: '0.36 [0.14, 0.74]', 'none', '-'."""
    median, interval = entry["median_error"], entry["interval"]
    text = "-" if median is None else ("none" if math.isinf(median) else f"{median:.2f}")
    if interval and math.isfinite(median or math.inf):
        text += f" [{_bound(interval[0])}, {_bound(interval[1])}]"
    return text


def _bound(value: float) -> str:
    # a percentile between two infinite medians (runs without a forecast) is NaN in numpy: the bound is infinite
    return "inf" if not math.isfinite(value) else f"{value:.2f}"


def forecast_table(scores: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: median relative error [bootstrap 95%] at each fraction, coverage and width at 50%."""
    fractions = list(next(iter(scores))["fractions"]) if scores else []
    head = [f"error at {float(f):.0%}" for f in fractions]
    lines = [markdown_row(["forecaster", *head, "interval covers (at 50%)", "mean width (at 50%)",
                           "'not within reach' at the end: controls", "never acquired"]),
             markdown_row(["---"] * (len(fractions) + 5))]
    for s in scores:
        cells = []
        for f in fractions:
            entry = s["fractions"][f]
            cells.append(f"{error_text(entry)} (n={entry['n']})")
        half = s["fractions"].get("0.5", {})
        width = half.get("mean_width")
        lines.append(markdown_row([str(s["rule"]), *cells, str(half.get("coverage", "-")),
                                   "-" if width is None else f"{width:.2f}", str(s["controls_beyond"]),
                                   str(s["never_acquired_beyond"])]))
    return "\n".join(lines)


def _cell(spread: Mapping[str, Any], digits: int = 0) -> str:
    if not spread["n"]:
        return "- (n=0)"
    fmt = f"{{:.{digits}f}}"
    return (f"{fmt.format(spread['median'])} [{fmt.format(spread['q25'])}, {fmt.format(spread['q75'])}] "
            f"(n={spread['n']})")
