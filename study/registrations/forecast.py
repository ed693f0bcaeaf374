"""Choosing the default warning and forecaster on the calibration seeds, and freezing the choice.

    python -m study.registrations.forecast select                 # tables -> docs/forecast-selection.md
    python -m study.registrations.forecast register     # the choice -> study/registration.json (commit it first)

Selection data: the committed corpus' hard runs (seeds 0-2) and shuffled-answer controls (seeds 0-1); nothing with
seed 100 or above. Forecasters that are fitted (the clock, the ridge, the calibrated thresholds) are scored leave
one seed out (what the held-out test asks: new seeds of known tasks) and leave one task out (whether geometry
generalises). Rules, fixed in advance:

- the forecaster: the lowest median error at half the time to acquisition, leave one seed out;
- geometry enters the default only if the ridge with RankMe features has a lower median error at half the time to
  acquisition leave one task out, with the paired bootstrap 95% interval of the difference below zero;
- the warning: the highest F1 among the candidates whose median lead is at least 20% of the time to acquisition
  (ties: the higher precision, then the earlier lead; a tie is reported).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from capgeo_callbacks.rules import (
    ClockForecaster,
    CurveForecaster,
    RidgeForecaster,
    Rule,
    ThresholdForecaster,
)
from capgeo_callbacks.scoring import (
    ScoredRun,
    forecast_scores,
    load_runs,
    warning_scores,
    warning_table,
)
from study.checkout import ROOT
from study.phases.corpus import CORPUS
from study.registrations.policy import as_registered, registered_rule

REGISTRATION = ROOT / "study" / "registration.json"
DOC = ROOT / "docs" / "forecast-selection.md"
HALF = "0.5"
FRACTION_KEYS = ("0.1", "0.25", "0.5", "0.75")
Fitted = Callable[[Sequence[ScoredRun]], Rule]


def selection_runs(registration: Path = REGISTRATION) -> list[ScoredRun]:
    """The runs the choice is made on: the hard runs and shuffled-answer controls, and once the choice is
    registered, exactly the runs the registration lists (runs committed after it do not move a frozen choice)."""
    runs = load_runs(CORPUS / "hard") + load_runs(CORPUS / "controls")
    bad = [run.name for run in runs if run.seed is None or run.seed >= 100]
    if bad:
        raise SystemExit(f"held-out runs among the selection data: {bad}")
    if registration.exists():
        listed = json.loads(registration.read_text())["selection"]["runs"]
        runs = [run for run in runs if Path(run.name).name in listed]
        missing = sorted(set(listed) - {Path(run.name).name for run in runs})
        if missing:
            raise SystemExit(f"runs the registration was chosen on are missing from the corpus: {missing}")
    return runs


def pairs(runs: Sequence[ScoredRun]) -> list[tuple[Any, int | None]]:
    return [(run.view, run.acquisition) for run in runs if not run.control]


FORECASTERS: dict[str, Fitted] = {
    "clock": lambda train: ClockForecaster().fit(pairs(train)),
    "token_acc-threshold": lambda train: ThresholdForecaster("token_acc", window=1.0),
    "token_acc-threshold-calibrated": lambda train: ThresholdForecaster("token_acc", window=1.0).fit(pairs(train)),
    "logprob-threshold-calibrated": lambda train: ThresholdForecaster("logprob", window=1.0).fit(pairs(train)),
    "curve-families": lambda train: CurveForecaster(),
    "ridge": lambda train: RidgeForecaster().fit(pairs(train)),
    "ridge-geometry": lambda train: RidgeForecaster(geometry=True).fit(pairs(train)),
}
# as the selection named them (it registered "study", now rankme-recovery: its tables print both)
FIXED_WARNINGS = ("study", "geometry-guarded", "loss-onset", "logprob-emergence", "probe-crossing", "warmup-end",
                  "clock-20")
HORIZONS = (200, 400)


def warning_candidates() -> dict[str, Fitted]:
    candidates: dict[str, Fitted] = {name: (lambda train, name=name: registered_rule(name)) for name in FIXED_WARNINGS}
    for horizon in HORIZONS:
        candidates[f"ridge-warning-{horizon}"] = lambda train, h=horizon: _named(
            RidgeForecaster(horizon=h).fit(pairs(train)), f"ridge-warning-{h}")
        candidates[f"token_acc-warning-{horizon}"] = lambda train, h=horizon: _named(
            ThresholdForecaster("token_acc", window=1.0, horizon=h), f"token_acc-warning-{h}")
    return candidates


def _named(rule: Rule, name: str) -> Rule:
    rule.name = name
    return rule


def folds(runs: Sequence[ScoredRun], by: str) -> list[tuple[list[ScoredRun], list[ScoredRun]]]:
    key = (lambda run: run.seed) if by == "seed" else (lambda run: run.task)
    groups = sorted({key(run) for run in runs}, key=str)
    return [([r for r in runs if key(r) != g], [r for r in runs if key(r) == g]) for g in groups]


def cross_validated_errors(make: Fitted, runs: Sequence[ScoredRun], by: str) -> dict[str, list[float]]:
    """Per fraction, every acquired run's relative error, each forecast made by a model fitted without its fold."""
    errors: dict[str, list[float]] = {}
    for train, test in folds(runs, by):
        scores = forecast_scores(make(train), test, keep_errors=True)
        for fraction, entry in scores["fractions"].items():
            errors.setdefault(fraction, []).extend(entry["errors"])
    return errors


def paired_difference(a: Sequence[float], b: Sequence[float], draws: int = 4000, seed: int = 0) -> tuple[float, ...]:
    """Median of a minus median of b, and its paired bootstrap 95% interval (runs resampled together)."""
    x, y = np.array(a, dtype=float), np.array(b, dtype=float)
    x, y = np.minimum(x, 10.0), np.minimum(y, 10.0)  # "no forecast" (inf) counts as a tenfold error
    rng = np.random.default_rng(seed)
    index = rng.integers(0, len(x), size=(draws, len(x)))
    diffs = np.median(x[index], axis=1) - np.median(y[index], axis=1)
    return float(np.median(x) - np.median(y)), float(np.quantile(diffs, 0.025)), float(np.quantile(diffs, 0.975))


def _median(values: Sequence[float]) -> float:
    return float(np.median(values)) if values else math.nan


def select() -> dict[str, Any]:
    runs = selection_runs()
    loso = {name: cross_validated_errors(make, runs, "seed") for name, make in FORECASTERS.items()}
    loto = {name: cross_validated_errors(make, runs, "task") for name in ("ridge", "ridge-geometry")
            for make in [FORECASTERS[name]]}
    forecaster = min(loso, key=lambda name: (_median(loso[name][HALF]), name))
    difference = paired_difference(loto["ridge-geometry"][HALF], loto["ridge"][HALF])
    geometry = difference[0] < 0 and difference[2] < 0
    if forecaster == "ridge" and geometry:
        forecaster = "ridge-geometry"
    # warnings: fitted ones leave one seed out, each run scored by the model not fitted on its seed
    warnings_scored = []
    for name, make in warning_candidates().items():
        fired: dict[str, int | None] = {}
        for train, test in folds(runs, "seed"):
            fired.update(warning_scores(make(train), test)["fired"])
        warnings_scored.append(warning_scores(as_registered(name), runs, fired))
    eligible = [s for s in warnings_scored if (s["lead_share"]["median"] or 0) >= 0.2]
    ranked = sorted(eligible, key=lambda s: (-s["f1"], -(s["precision"].value or 0), -(s["lead_share"]["median"] or 0)))
    best = ranked[0]
    ties = [s["rule"] for s in ranked[1:] if (s["f1"], s["precision"].value) == (best["f1"], best["precision"].value)]
    return {"runs": runs, "loso": loso, "loto": loto, "forecaster": forecaster, "geometry": geometry,
            "geometry_difference": difference, "warnings": warnings_scored, "warning": best["rule"], "ties": ties}


def report(chosen: dict[str, Any]) -> str:
    runs = chosen["runs"]
    acquired = sum(r.acquisition is not None and not r.control for r in runs)
    shuffled = sorted({r.seed for r in runs if r.summary.get("shuffled_answers")})
    lines = ["# Choosing the default warning and forecaster (calibration seeds only)", "",
             "Generated by `python -m study.registrations.forecast select` from the committed corpus: hard runs, seeds "
             f"{', '.join(map(str, sorted({r.seed for r in runs if not r.summary.get('shuffled_answers')})))}, "
             f"and shuffled-answer controls, seeds {', '.join(map(str, shuffled)) or 'none'} ({len(runs)} runs: "
             f"{acquired} acquired, {sum(r.control for r in runs)} controls: shuffled answers, and named negative "
             "controls that stayed at chance). The rules of the choice are in `study/registrations/forecast.py`'s "
             "docstring, fixed before the held-out runs existed.", "",
             "## Forecasters, leave one seed out (median |predicted - actual| / actual)", "",
             "| forecaster | at 10% | at 25% | at 50% | at 75% |", "| --- | --- | --- | --- | --- |"]
    for name, errors in chosen["loso"].items():
        lines.append(f"| {name} | " + " | ".join(_err(errors.get(f, [])) for f in FRACTION_KEYS) + " |")
    lines += ["", "## Geometry, leave one task out", "", "| forecaster | at 10% | at 25% | at 50% | at 75% |",
              "| --- | --- | --- | --- | --- |"]
    for name, errors in chosen["loto"].items():
        lines.append(f"| {name} | " + " | ".join(_err(errors.get(f, [])) for f in FRACTION_KEYS) + " |")
    diff = chosen["geometry_difference"]
    lines += ["", f"Median error at 50% with RankMe features minus without: {diff[0]:+.3f} (paired bootstrap 95% "
              f"[{diff[1]:+.3f}, {diff[2]:+.3f}]): geometry {'enters' if chosen['geometry'] else 'does not enter'} "
              "the default.", "", "## Warnings (fitted ones leave one seed out)", "",
              warning_table(chosen["warnings"]), "",
              late_note(chosen["warnings"], runs), "",
              f"Chosen: forecaster **{chosen['forecaster']}**, warning **{chosen['warning']}**"
              + (f" (tied with {', '.join(chosen['ties'])})" if chosen["ties"] else "") + "." + registered_note(chosen)]
    return "\n".join(lines) + "\n"


def late_note(scored: Sequence[dict[str, Any]], runs: Sequence[ScoredRun]) -> str:
    """Which rules alerted at or after acquisition, and their precision as reported before those alerts stopped
    counting (docs/design.md, "The warning's record")."""
    parts = []
    for s in scored:
        late = sum(step is not None and run.acquisition is not None and step >= run.acquisition
                   for run in runs if (step := s["fired"].get(run.name)) is not None)
        if late:
            parts.append(f"{s['rule']} {s['precision'].k}/{s['precision'].n} ({s['precision'].k}/"
                         f"{s['precision'].n + late} counting {late})")
    if not parts:
        return "No candidate alerted at or after acquisition."
    return ("Alerts at or after acquisition warn of nothing and are not counted (before that was fixed the report "
            "counted them): " + "; ".join(parts) + ".")


def registered_note(chosen: dict[str, Any]) -> str:
    if not REGISTRATION.exists():
        return ""
    frozen = json.loads(REGISTRATION.read_text())
    same = (frozen["forecaster"]["name"], frozen["warning"]["name"]) == (chosen["forecaster"], chosen["warning"])
    return (" The same as registered (`study/registration.json`)." if same else
            f" Registered: forecaster {frozen['forecaster']['name']}, warning {frozen['warning']['name']}; the "
            "registration stands, nothing is re-chosen after it.")


def _err(values: Sequence[float]) -> str:
    if not values:
        return "-"
    median = _median(values)
    return f"{'none' if math.isinf(median) else f'{median:.3f}'} (n={len(values)})"


def final_rule(name: str, runs: Sequence[ScoredRun]) -> Rule:
    """A chosen rule fitted on every selection run."""
    candidates = {**warning_candidates(), **FORECASTERS}
    return candidates[name](runs)


def register(chosen: dict[str, Any]) -> dict[str, Any]:
    runs = chosen["runs"]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    entries = {}
    for role, name in (("warning", chosen["warning"]), ("forecaster", chosen["forecaster"])):
        rule = final_rule(name, runs)
        entries[role] = {"name": name, "class": f"{type(rule).__module__}.{type(rule).__qualname__}",
                         "settings": rule.settings()}
    comparators = {}
    for role, names in (("warnings", ("study", "loss-onset", "logprob-emergence", "warmup-end", "clock-20")),
                        ("forecasters", ("clock", "logprob-threshold-calibrated", "curve-families", "ridge"))):
        for name in names:
            rule = final_rule(name, runs)
            comparators.setdefault(role, {})[name] = {"class": f"{type(rule).__module__}.{type(rule).__qualname__}",
                                                      "settings": rule.settings()}
    learned = sorted({run.summary["task"] for run in runs if run.acquisition is not None and not run.control})
    return {
        "registered": datetime.date.today().isoformat(),
        "code_commit": commit,
        "selection": {"data": "corpus/hard and corpus/controls as committed at registration",
                      "runs": sorted(Path(run.name).name for run in runs), "report": "docs/forecast-selection.md"},
        **entries,
        "geometry_enters_default": chosen["geometry"],
        "compared_with": comparators,  # what the held-out report sets beside the choice, frozen here too
        "held_out": {"seeds": [100, 101, 102], "tasks": learned, "controls": "the same tasks, --shuffle-answers",
                     "difficulty": "hard", "size": "xs"},
        "targets": {"warning": "precision >= 0.8 and recall >= 0.8, median lead >= 20% of the time to acquisition",
                    "forecaster": "median error at 50% <= half the clock's, and no worse than the best "
                                  "learning-curve extrapolator"},
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("select", "register"))
    args = parser.parse_args(argv)
    chosen = select()
    DOC.write_text(report(chosen))
    print(DOC.read_text())
    if args.command == "register":
        if REGISTRATION.exists():
            raise SystemExit(f"{REGISTRATION} exists: a registration is frozen once made (delete it in a commit of "
                             "its own, with the reason, before registering again)")
        REGISTRATION.write_text(json.dumps(register(chosen), indent=1) + "\n")
        print(f"wrote {REGISTRATION}; commit it before starting any held-out run")


if __name__ == "__main__":
    main()
