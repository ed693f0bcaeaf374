"""The pre-registered held-out test: seeds 100-102 of every hard task acquired on the calibration seeds, and their
shuffled-answer controls, run only under a committed registration (``study/registration.json``).

    python -m study.heldout run --workers 2      # refuses without a committed registration
    python -m study.heldout export               # -> corpus/heldout/<run>.json.gz
    python -m capgeo_callbacks.scoring corpus/heldout --registration study/registration.json \\
        --rules <registered warning> ... --forecasters <registered forecaster> ...

Each run records the registration's sha256 and the code commit (train.py ``--registration``); the scorer
reports a held-out run only when both match a registration committed before it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from launch import ROOT, add_launch_arguments, launch_with, summary_of
from launch import Trial as Job
from study.corpus import CORPUS, write_packed
from study.forecast import REGISTRATION

RUNS = ROOT / "runs" / "heldout"


def committed(path: Path) -> bool:
    """Whether ``path`` is committed as it is (tracked, no uncommitted change)."""
    try:
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(path)], cwd=ROOT, capture_output=True,
                                 check=False).returncode == 0
        clean = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", str(path)], cwd=ROOT,
                               check=False).returncode == 0
    except OSError:
        return False
    return tracked and clean


def heldout_jobs(registration: Path = REGISTRATION) -> list[Job]:
    """Seed-major: every registered task's seed 100 and its control first."""
    if not registration.exists() or not committed(registration):
        raise SystemExit(f"no committed registration at {registration}: held-out seeds run only after the choice "
                         "is frozen (python -m study.forecast register, then commit it)")
    plan = json.loads(registration.read_text())["held_out"]
    jobs = []
    for seed in plan["seeds"]:
        for task in plan["tasks"]:
            common = ("--task", task, "--difficulty", plan["difficulty"], "--size", plan["size"], "--seed", str(seed),
                      "--registration", str(registration))
            jobs.append(Job(f"{task}-hard-xs-s{seed}", (*common, "--stop-when-learned"), RUNS,
                            {"seed": seed, "task": task}))
            jobs.append(Job(f"{task}-hard-xs-s{seed}-shuffled", (*common, "--shuffle-answers"), RUNS,
                            {"seed": seed, "task": task, "control": True}))
    return jobs


def export() -> int:
    count = 0
    for job in heldout_jobs():
        summary = summary_of(job)
        if summary is not None:
            write_packed(summary, CORPUS / "heldout" / f"{job.name}.json.gz")
            count += 1
    return count


DOC = ROOT / "docs" / "heldout.md"


def build(entry: dict, name: str):  # noqa: ANN201 - a Rule
    """A rule from its registration entry (class path and settings)."""
    import importlib

    module, _, attribute = entry["class"].rpartition(".")
    rule = getattr(importlib.import_module(module), attribute).from_settings(entry["settings"])
    rule.name = name
    return rule


def report(registration: Path = REGISTRATION, folder: Path = CORPUS / "heldout") -> str:
    """The registered warning and forecaster on the held-out runs, exactly as registered, beside the frozen
    comparators; each target met or missed, and by how much."""
    import math

    from capgeo_callbacks.scoring import (
        forecast_scores,
        forecast_table,
        held_out_check,
        load_runs,
        warning_scores,
        warning_table,
    )

    frozen = json.loads(registration.read_text())
    runs, dropped = held_out_check(load_runs(folder), registration)
    runs = [run for run in runs if run.seed is not None and run.seed >= 100]
    warning = build(frozen["warning"], frozen["warning"]["name"])
    forecaster = build(frozen["forecaster"], frozen["forecaster"]["name"])
    warnings_ = [warning] + [build(e, n) for n, e in frozen["compared_with"]["warnings"].items()]
    forecasters = [forecaster] + [build(e, n) for n, e in frozen["compared_with"]["forecasters"].items()]
    warned = [warning_scores(rule, runs) for rule in warnings_]
    forecast = [forecast_scores(rule, runs) for rule in forecasters]
    chosen, clock = forecast[0]["fractions"]["0.5"], next(f for f in forecast if f["rule"] == "clock")
    extrapolators = [f for f in forecast[1:] if f["rule"] in ("logprob-threshold-calibrated", "curve-families")]
    best_other = min((e for f in extrapolators if (e := f["fractions"]["0.5"]["median_error"]) is not None),
                     default=math.inf)
    w = warned[0]
    # a target on nothing measured is missed, never met by default
    error, clock_error = chosen["median_error"], clock["fractions"]["0.5"]["median_error"]
    beats_clock = error is not None and clock_error is not None and error <= 0.5 * clock_error
    lines = [
        "# The pre-registered held-out test", "",
        "Generated by `python -m study.heldout report` from `corpus/heldout/` and the committed registration "
        f"`study/registration.json` (sha256 `{json.dumps(sha256(registration))[1:-1]}`, registered "
        f"{frozen['registered']} at commit `{frozen['code_commit'][:10]}`). Each run below was made with code that "
        "already held that file and records its hash; "
        f"{len(runs)} runs kept ({sum(r.acquisition is not None and not r.control for r in runs)} acquired, "
        f"{sum(r.acquired_fully and not r.control for r in runs)} fully, {sum(r.control for r in runs)} controls, "
        f"{sum(r.acquisition is None and not r.control for r in runs)} never acquired), {len(dropped)} left out"
        + (": " + "; ".join(dropped) if dropped else "") + ".", "",
        f"## The warning: `{warning.name}` (registered), beside the frozen comparators", "", warning_table(warned), "",
        f"## The forecast: `{forecaster.name}` (registered), beside the frozen comparators", "",
        forecast_table(forecast), "", "## Targets", "",
        "| target | measured | met |", "| --- | --- | --- |",
        f"| warning precision >= 0.8 | {w['precision']} | {_met((w['precision'].value or 0) >= 0.8)} |",
        f"| warning recall >= 0.8 | {w['recall']} | {_met((w['recall'].value or 0) >= 0.8)} |",
        f"| median lead >= 20% of the time to acquisition | {_num(w['lead_share']['median'])} | "
        f"{_met((w['lead_share']['median'] or 0) >= 0.2)} |",
        f"| forecast error at 50% <= half the clock's ({_num(clock_error)}) | {_num(chosen['median_error'])} | "
        f"{_met(beats_clock)} |",
        f"| ... and no worse than the best learning-curve extrapolator ({_num(best_other)}) | "
        f"{_num(chosen['median_error'])} | {_met(error is not None and error <= best_other)} |",
    ]
    return "\n".join(lines) + "\n"


def brief(registration: Path = REGISTRATION, folder: Path = CORPUS / "heldout") -> str:
    """The README's small table: the registered warning and forecast beside the clock and the loss-only rules."""
    import math

    from capgeo_callbacks.scoring import forecast_scores, held_out_check, load_runs, warning_scores

    frozen = json.loads(registration.read_text())
    runs = [run for run in held_out_check(load_runs(folder), registration)[0] if (run.seed or 0) >= 100]
    compared = frozen["compared_with"]
    warnings_ = [(f"**{frozen['warning']['name']}** (registered)", build(frozen["warning"], frozen["warning"]["name"]))]
    warnings_ += [(f"{name}{note}", build(compared["warnings"][name], name)) for name, note in
                  (("study", " (RankMe collapse)"), ("loss-onset", " (loss only)"), ("clock-20", " (a clock)"))]
    lines = ["| warning | precision | recall | false alarms on controls | median lead (share of the time to "
             "acquisition) |", "| --- | --- | --- | --- | --- |"]
    for label, rule in warnings_:
        w = warning_scores(rule, runs)
        lead = w["lead_share"]["median"]
        lines.append(f"| {label} | {w['precision']} | {w['recall']} | {w['false_alarms_controls']} | "
                     f"{'-' if lead is None else f'{lead:.2f}'} |")
    forecasts = [(f"**{frozen['forecaster']['name']}** (registered)",
                  build(frozen["forecaster"], frozen["forecaster"]["name"]))]
    forecasts += [(f"{name}{note}", build(compared["forecasters"][name], name)) for name, note in
                  (("clock", " (median of the calibration seeds)"), ("curve-families", " (Domhan et al.)"),
                   ("logprob-threshold-calibrated", " (loss threshold, Du et al.)"))]
    lines += ["", "| forecast of the acquisition step | median error at half the time to acquisition [95%] |",
              "| --- | --- |"]
    for label, rule in forecasts:
        half = forecast_scores(rule, runs)["fractions"]["0.5"]
        median, interval = half["median_error"], half["interval"]
        text = "-" if median is None else ("none" if math.isinf(median) else f"{median:.2f}")
        if interval and median is not None and math.isfinite(median):
            text += f" [{interval[0]:.2f}, {interval[1]:.2f}]"
        lines.append(f"| {label} | {text} (n={half['n']}) |")
    return "\n".join(lines)


def _met(value: bool) -> str:
    return "yes" if value else "**no**"


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return "none (never forecast)" if value == float("inf") else f"{value:.3f}"


def sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run")
    add_launch_arguments(run)
    run.add_argument("--nice", type=int, default=0)
    commands.add_parser("export")
    commands.add_parser("report", help="the registered choice on the held-out runs -> docs/heldout.md")
    commands.add_parser("brief", help="the README's small table")
    args = parser.parse_args(argv)
    if args.command == "brief":
        print(brief())
        return
    if args.command == "report":
        DOC.write_text(report())
        print(DOC.read_text())
        return
    if args.command == "run":
        os.nice(args.nice)
        jobs = heldout_jobs()
        done = [job for job in jobs if (CORPUS / "heldout" / f"{job.name}.json.gz").exists()]
        launch_with([job for job in jobs if job not in done], args, name="heldout", storage=RUNS / ".engine",
                    on_outcome=lambda outcome: export())
    print(f"{export()} held-out runs exported to {CORPUS / 'heldout'}")


if __name__ == "__main__":
    main()
