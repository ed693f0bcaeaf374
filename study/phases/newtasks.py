"""The registered test on task families capgeo was never built on (issue 29).

    python -m study.phases.newtasks run       # the registered runs, resumable -> runs/newtasks/, corpus/newtasks/
    python -m study.phases.newtasks report    # -> docs/newtasks.md (scored by capgeo_callbacks.scoring)
    python -m study.phases.newtasks readme    # README.md's table "on a task nobody calibrated"

The families are examples a user could have written (``examples/new_tasks``), with capgeo attached as README.md's
"On your own model" prints it: no calibration, no chance table, no clock. What is registered
(``study/newtasks_registration.json``: families and settings, seeds, controls, the default warnings and forecaster,
their comparators, metrics and targets) was committed before the first run; a run refuses an uncommitted tree or
registration, and records the registration's sha256 and the commit it ran; the report refuses a run whose
registration differs or postdates it.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from capgeo_callbacks.rules import make_rule, rule_output
from capgeo_callbacks.run.summary import read_summary
from capgeo_callbacks.scoring import ScoredRun, forecast_scores, forecast_table, load_runs, warning_scores
from capgeo_callbacks.scoring.scores import Rate, error_text, warning_table
from launch import ROOT, require_clean_tree
from study.phases.corpus import CORPUS, write_packed
from study.registrations.policy import committed, registered_before, sha256

REGISTRATION = ROOT / "study" / "newtasks_registration.json"
RUNS = ROOT / "runs" / "newtasks"
FOLDER = CORPUS / "newtasks"
DOC = ROOT / "docs" / "newtasks.md"
PILOTS = ROOT / "examples" / "new_tasks" / "PILOTS.md"
EXAMPLE = "examples.new_tasks"  # the families' example, run by its own command: ``python -m examples.new_tasks``


def registration(path: Path = REGISTRATION) -> dict[str, Any]:
    return json.loads(path.read_text())


def jobs(path: Path = REGISTRATION) -> list[tuple[str, int, bool]]:
    """``(family, seed, control)`` of every registered run."""
    found = registration(path)
    return [(family, seed, False) for family in found["families"] for seed in found["seeds"]] + [
        (family, found["controls"]["seed"], True) for family in found["families"]]


def run_all(path: Path = REGISTRATION, runs: Path = RUNS, folder: Path = FOLDER) -> list[Path]:
    """Run (or resume) every registered run not yet in ``folder``; export each as it finishes. Each run is the
    example's own command (``python -m examples.new_tasks``: the study runs it as a user would, and imports none of
    it); a run whose recorded settings are not the registered ones is refused."""
    commit = require_clean_tree("the registered test on new task families")
    if not committed(path):
        raise SystemExit(f"{path.relative_to(ROOT)} is not committed as it is: commit the registration first")
    found, digest = registration(path), sha256(path)
    written = []
    for family, seed, control in jobs(path):
        done = list(folder.glob(f"{family}{'-control' if control else ''}-s{seed}.json.gz"))
        if done:
            continue
        printed = subprocess.run([sys.executable, "-m", EXAMPLE, family, "--seed", str(seed), "--root", str(runs),
                                  *(["--control"] if control else [])], cwd=ROOT, check=True, capture_output=True,
                                 text=True).stdout
        run_dir = Path(printed.strip().splitlines()[-1]).parent  # the example prints its summary's path
        record = json.loads((run_dir / "run.json").read_text())
        if record["settings"] != found["families"][family]:
            raise SystemExit(f"{run_dir}: the example ran {family} with {record['settings']}, not the registered "
                             f"{found['families'][family]}")
        summary = read_summary(run_dir / "capgeo_summary.json")
        summary.update(task=family, seed=seed, shuffled_answers=control, max_steps=record["settings"]["max_steps"],
                       settings=record["settings"], cpu_seconds=record["cpu_seconds"],
                       wall_seconds=round(sum(part["wall_seconds"] for part in record["parts"]), 1),
                       resumes=len(record["parts"]) - 1, threads=record["threads"],
                       omp_num_threads=record["omp_num_threads"], torch=torch.__version__, commit=commit,
                       uncommitted_changes=False,
                       registration={"path": path.relative_to(ROOT).as_posix(), "sha256": digest})
        target = folder / f"{run_dir.name}.json.gz"
        written.append(write_packed(summary, target))
        print(f"{run_dir.name}: acquisition {summary.get('acquisition_step')}, {record['cpu_seconds']} CPU s -> "
              f"{target}")
    return written


def registered_runs(path: Path = REGISTRATION, folder: Path = FOLDER) -> list[ScoredRun]:
    """The runs of ``folder``, or exit naming each run not made under this registration."""
    digest, refused = sha256(path), []
    runs = load_runs(folder)
    for run in runs:
        made = run.summary.get("registration") or {}
        if made.get("sha256") != digest:
            refused.append(f"{run.name}: registration sha256 {made.get('sha256')!r}, not {digest}")
        elif not registered_before(path, run.summary.get("commit")):
            refused.append(f"{run.name}: made at {run.summary.get('commit')}, before the registration's commit")
    if refused:
        raise SystemExit("runs not made under the registration:\n" + "\n".join(refused))
    return runs


def _pilot_cpu_seconds(path: Path = PILOTS) -> tuple[float, int]:
    """The pilots' CPU seconds and count, from PILOTS.md's table (its 'cpu s' column, from each pilot's run.json)."""
    rows = [line.split("|")[1:-1] for line in path.read_text().splitlines() if line.startswith("| ")]
    head = [cell.strip() for cell in rows[0]]
    column = head.index("cpu s")
    values = [float(row[column]) for row in rows[1:] if re.fullmatch(r"[\d.]+", row[column].strip())]
    return sum(values), len(values)


def scored(path: Path = REGISTRATION, folder: Path = FOLDER) -> dict[str, Any]:
    found, runs = registration(path), registered_runs(path, folder)
    warnings = [*found["warnings"]["default"], *found["warnings"]["comparators"]]
    forecasters = [found["forecaster"]["default"], *found["forecast_comparators"]]
    return {"registration": found, "runs": runs,
            "warnings": {name: warning_scores(make_rule(name), runs) for name in warnings},
            "forecasts": {name: forecast_scores(make_rule(name), runs) for name in forecasters}}


def targets(s: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(target, measured, verdict)`` of each registered target."""
    found, rows = s["registration"], []
    default = found["forecaster"]["default"]
    half = {name: score["fractions"]["0.5"] for name, score in s["forecasts"].items()}
    ours = half[default]["median_error"]
    for name in found["forecast_comparators"]:
        theirs = half[name]["median_error"]
        met = ours is not None and theirs is not None and ours < theirs
        by = ("" if met or ours is None or theirs is None
              else " (neither forecasts on most runs at 50%)" if math.isinf(ours) and math.isinf(theirs)
              else f" (by {ours - theirs:.2f})" if math.isfinite(ours) else " (no forecast on most runs at 50%)")
        rows.append((f"{default}'s error at 50% below {name}'s", f"{error_text(half[default])} against "
                     f"{error_text(half[name])}", ("met" if met else "missed") + by))
    coverage: Rate = half[default]["coverage"]
    least = found["targets"]["interval_coverage_at_half_at_least"]
    rows.append((f"{default}'s interval covers at 50%: at least {least}", str(coverage),
                 _verdict(coverage.value, least)))
    precision_floor = found["targets"]["warning_precision_at_least"]
    for name in found["warnings"]["default"]:
        score = s["warnings"][name]
        rows.append((f"{name}: precision at least {precision_floor}", str(score["precision"]),
                     _verdict(score["precision"].value, precision_floor)))
        alarms: Rate = score["false_alarms_controls"]
        rows.append((f"{name}: no false alarm on controls", str(alarms),
                     "met" if alarms.n and alarms.k == 0 else f"missed ({alarms.k} of {alarms.n})"))
    return rows


def _verdict(value: float | None, floor: float) -> str:
    if value is None:
        return "missed (n = 0)"
    return "met" if value >= floor else f"missed (by {floor - value:.2f})"


def runs_table(runs: Sequence[ScoredRun]) -> list[str]:
    lines = ["| run | acquisition | budget | acquired fully | first alert: probe-crossing / study | CPU s |",
             "| --- | ---: | ---: | --- | --- | ---: |"]
    for run in sorted(runs, key=lambda r: r.name):
        alerts = {alert["rule"]: alert["step"] for alert in reversed(run.summary.get("alerts") or [])
                  if alert.get("kind") == "run"}
        lines.append(f"| {Path(run.name).name.removesuffix('.json.gz')} | {run.acquisition or '-'} | "
                     f"{run.summary['max_steps']} | {'yes' if run.acquired_fully else 'no'} | "
                     f"{alerts.get('probe-crossing', '-')} / {alerts.get('study', '-')} | "
                     f"{run.summary['cpu_seconds']} |")
    return lines


def steady_forecasts(runs: Sequence[ScoredRun], name: str) -> list[dict[str, Any]]:
    """Per acquired run, the forecast ``name`` made where it began to forecast at every evaluation up to acquisition
    (before it, it said nothing or 'not within reach' at least once): when (share of the time to acquisition),
    whether its interval held the actual step, and its width relative to that step; share None where its last
    evaluation before acquisition had no forecast."""
    rule, found = make_rule(name), []
    for run in runs:
        if run.acquisition is None or run.control:
            continue
        before = [end for end in range(1, len(run.view.steps) + 1) if run.view.steps[end - 1] < run.acquisition]
        made = None
        for end in reversed(before):
            forecast = rule_output(rule, run.view.prefix(end), []).forecast
            if forecast is None or not math.isfinite(forecast.predicted):
                break
            made = forecast
        entry: dict[str, Any] = {"run": run, "share": None, "held": None, "width": None}
        if made is not None:
            high = math.inf if made.high is None else made.high
            low = -math.inf if made.low is None else made.low
            entry.update(share=made.step / run.acquisition, held=low <= run.acquisition <= high,
                         width=(high - low) / run.acquisition)
        found.append(entry)
    return found


def act_on(runs: Sequence[ScoredRun], name: str) -> str:
    """What a user can act on: from when on the default forecaster speaks steadily, how often its interval holds
    then, how wide it is."""
    found = steady_forecasts(runs, name)
    made = [entry for entry in found if entry["share"] is not None]
    if not made:
        return f"{name} was silent at the last evaluation before acquisition on all {len(found)} acquired runs."
    shares = sorted(entry["share"] for entry in made)
    widths = [entry["width"] for entry in made]
    return (f"{name} forecast at every evaluation from some point up to acquisition on {len(made)} of the "
            f"{len(found)} acquired runs (on the others it was silent just before acquisition); that point came at a "
            f"median {float(np.median(shares)):.2f} of the time to acquisition "
            f"(range {shares[0]:.2f}-{shares[-1]:.2f}). "
            f"The forecast made there held the actual step in its interval on "
            f"{Rate(sum(bool(e['held']) for e in made), len(made))} runs, its interval a median "
            f"{float(np.median(widths)):.2f} of the acquisition step wide.")


def cost_lines(runs: Sequence[ScoredRun]) -> list[str]:
    pilots, count = _pilot_cpu_seconds()
    registered = sum(run.summary["cpu_seconds"] for run in runs)
    return [f"- pilots: {count} runs, {pilots / 3600:.3f} CPU-hours (the 'cpu s' column of "
            "[examples/new_tasks/PILOTS.md](../examples/new_tasks/PILOTS.md); the screening before them is not "
            "counted there)",
            f"- registered runs: {len(runs)} runs, {registered / 3600:.3f} CPU-hours (each summary's `cpu_seconds`: "
            "process CPU time of training, validation and the callbacks, one thread)"]


def page(path: Path = REGISTRATION, folder: Path = FOLDER) -> str:
    s = scored(path, folder)
    found, runs = s["registration"], s["runs"]
    commits = sorted({run.summary.get("commit", "")[:8] for run in runs})
    warnings = " ".join(s["warnings"])
    forecasters = " ".join(s["forecasts"])
    return "\n".join([
        "# On a task nobody calibrated: the registered test on new task families", "",
        "Generated by `python -m study.phases.newtasks report`. The scores are "
        f"`python -m capgeo_callbacks.scoring corpus/newtasks --rules {warnings} --forecasters {forecasters}`.", "",
        f"Registered in [`study/newtasks_registration.json`](../study/newtasks_registration.json) "
        f"(sha256 `{sha256(path)[:12]}`, committed before every run: each run records the sha256 and its commit, "
        f"{', '.join(f'`{c}`' for c in commits)}). Families: {', '.join(found['families'])} "
        "([examples/new_tasks](../examples/new_tasks)), seeds "
        f"{', '.join(map(str, found['seeds']))} and one shuffled-answer control each (seed "
        f"{found['controls']['seed']}); capgeo attached as README.md prints it, no calibration. Pilot seeds "
        f"{', '.join(map(str, found['seeds_never_reported']))} are not reported.", "",
        f"{len(runs)} runs: {sum(r.acquisition is not None and not r.control for r in runs)} acquired "
        f"({sum(r.acquired_fully and not r.control for r in runs)} fully), {sum(r.control for r in runs)} controls, "
        f"{sum(r.acquisition is None and not r.control for r in runs)} never acquired.", "",
        "## The runs", "", *runs_table(runs), "",
        "## Targets (registered)", "", "| target | measured | verdict |", "| --- | --- | --- |",
        *[f"| {a} | {b} | {c} |" for a, b, c in targets(s)], "",
        "## What a user can act on", "", act_on(runs, found["forecaster"]["default"]), "",
        "## Warnings", "", warning_table(list(s["warnings"].values())), "",
        "## Forecasts", "", forecast_table(list(s["forecasts"].values())), "",
        "## Cost", "", *cost_lines(runs), ""])


def readme(path: Path = REGISTRATION, folder: Path = FOLDER) -> str:
    """README.md's table: the default warnings and forecaster beside loss-onset and the comparator forecaster with
    the lowest error at 50%, with n and intervals; then what a user can act on."""
    s = scored(path, folder)
    found, runs = s["registration"], s["runs"]
    acquired = sum(run.acquisition is not None and not run.control for run in runs)
    lines = [f"| {len(found['families'])} new task families, {acquired} acquired runs, "
             f"{sum(run.control for run in runs)} controls | precision | false alarms on controls | "
             "forecast error at 50% | interval holds the step |", "| --- | --- | --- | --- | --- |"]
    for name in [*found["warnings"]["default"], *found["warnings"]["comparators"]]:
        score = s["warnings"][name]
        lines.append(f"| {name} (warning) | {score['precision']} | {score['false_alarms_controls']} | | |")
    half = {name: score["fractions"]["0.5"] for name, score in s["forecasts"].items()}
    best = min(found["forecast_comparators"], key=lambda name: (half[name]["median_error"], name))
    for name, role in ((found["forecaster"]["default"], "default forecast"), (best, "best comparator")):
        lines.append(f"| {name} ({role}) | | | {error_text(half[name])} (n={half[name]['n']}) | "
                     f"{half[name]['coverage']} |")
    return "\n".join([*lines, "", act_on(runs, found["forecaster"]["default"]) +
                      " Every registered target and comparator: [docs/newtasks.md](docs/newtasks.md)."])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("run", "report", "readme"))
    args = parser.parse_args(argv)
    if args.command == "run":
        run_all()
    elif args.command == "report":
        DOC.write_text(page() + "\n")
        print(DOC.read_text())
    else:
        print(readme())


if __name__ == "__main__":
    main()
