"""The registered test on task families capgeo was never built on (issue 29).

    python -m study.phases.newtasks run     # the registered runs (launcher, resumable) -> runs/, study/corpus/newtasks/
    python -m study.phases.newtasks report  # -> docs/newtasks.md (scored by capgeo_callbacks.scoring)
    python -m study.phases.newtasks readme  # README.md's table "on a task nobody calibrated"
    python -m study.phases.newtasks replay  # whether a replay of the summaries says what the rules said live

The families are examples a user could have written (``examples/new_tasks``), with capgeo attached as README.md's
"On your own model" prints it: no calibration, no chance table, no clock. Each run is a trial of the launcher on the
example's own training function (``examples.new_tasks.run:train``; ``--engine``, ``--workers``, ``--address`` as for
the study's other phases). What is registered
(``study/newtasks_registration.json``: families and settings, seeds, controls, the default warnings and forecaster,
their comparators, metrics and targets) was committed before the first run; a run refuses an uncommitted tree or
registration, and records the registration's sha256 and the commit it ran; the report refuses a run whose
registration differs or postdates it.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from capgeo_callbacks.keys import RANKME_RECOVERY, rule_name
from capgeo_callbacks.rules import rule_output
from capgeo_callbacks.run.summary import read_summary
from capgeo_callbacks.scoring import ScoredRun, forecast_scores, forecast_table, load_runs, warning_scores
from capgeo_callbacks.scoring.scores import Rate, error_text, scored_run, warning_table
from capgeo_callbacks.sweeps import FunctionTrial, Outcome, add_launch_arguments, launch_with
from study.checkout import ROOT, require_clean_tree
from study.phases import functions
from study.phases.corpus import CORPUS, made_on, unrecorded, write_packed
from study.registrations.policy import as_registered, committed, registered_before, registered_rule, sha256

REGISTRATION = ROOT / "study" / "newtasks_registration.json"
RUNS = ROOT / "runs" / "newtasks"
FOLDER = CORPUS / "newtasks"
DOC = ROOT / "docs" / "newtasks.md"
PILOTS = ROOT / "examples" / "new_tasks" / "PILOTS.md"


def run_name(family: str, seed: int, control: bool) -> str:
    """A registered run's name: its trial folder's and its exported summary's (the example's own naming)."""
    return f"{family}{'-control' if control else ''}-s{seed}"


def registration(path: Path = REGISTRATION) -> dict[str, Any]:
    return json.loads(path.read_text())


def jobs(path: Path = REGISTRATION) -> list[tuple[str, int, bool]]:
    """``(family, seed, control)`` of every registered run."""
    found = registration(path)
    return [(family, seed, False) for family in found["families"] for seed in found["seeds"]] + [
        (family, found["controls"]["seed"], True) for family in found["families"]]


def run_all(path: Path = REGISTRATION, runs: Path = RUNS, folder: Path = FOLDER,
            launch_args: argparse.Namespace | None = None) -> list[Path]:
    """Run (or resume) every registered run not yet in ``folder``, each a trial of the launcher on the example's own
    training function (:data:`study.phases.functions.new_tasks`, as a user's sweep would run it; ``launch_args``:
    :func:`capgeo_callbacks.sweeps.add_launch_arguments`'; default one at a time on a local Ray); export each as it
    finishes. A run whose recorded settings are not the registered ones is refused."""
    commit = require_clean_tree("the registered test on new task families")
    if not committed(path):
        raise SystemExit(f"{path.relative_to(ROOT)} is not committed as it is: commit the registration first")
    found, digest = registration(path), sha256(path)
    trials = [FunctionTrial(run_name(family, seed, control), functions.new_tasks,
                            {"family": family, "seed": seed, "control": control, **found["families"][family]},
                            logdir=runs)
              for family, seed, control in jobs(path)]
    written = []

    def export(trial: FunctionTrial) -> None:
        target = folder / f"{trial.name}.json.gz"
        if target.exists():
            return
        family, seed, control = (trial.settings[key] for key in ("family", "seed", "control"))
        record = json.loads((trial.root / "run.json").read_text())
        if record["settings"] != found["families"][family]:
            raise SystemExit(f"{trial.root}: the example ran {family} with {record['settings']}, not the registered "
                             f"{found['families'][family]}")
        summary = read_summary(trial.root / "capgeo_summary.json")
        # max_steps and warmup_steps are in it already: the runner gave them to the detector before the run
        summary.update(task=family, seed=seed, shuffled_answers=control, settings=record["settings"],
                       cpu_seconds=record["cpu_seconds"],
                       wall_seconds=round(sum(part["wall_seconds"] for part in record["parts"]), 1),
                       resumes=len(record["parts"]) - 1, threads=record["threads"],
                       omp_num_threads=record["omp_num_threads"], **made_on(record["device"]), commit=commit,
                       uncommitted_changes=False,
                       registration={"path": path.relative_to(ROOT).as_posix(), "sha256": digest})
        written.append(write_packed(summary, target))
        print(f"{trial.name}: acquisition {summary.get('acquisition_step')}, {record['cpu_seconds']} CPU s -> "
              f"{target}", flush=True)

    def ended(outcome: Outcome) -> None:
        if outcome.action in ("done", "resumed"):
            export(outcome.trial)

    todo = [trial for trial in trials if not (folder / f"{trial.name}.json.gz").exists()]
    options = launch_args or argparse.Namespace(engine="ray", workers=1, address=None)
    for outcome in launch_with(todo, options, storage=runs / ".engine", name="newtasks", on_outcome=ended):
        if outcome.action == "skipped":  # finished before, not yet exported
            export(outcome.trial)
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


def with_registered_warmup(runs: Sequence[ScoredRun], found: dict[str, Any]) -> tuple[list[ScoredRun], int]:
    """``runs`` as they read with their family's registered warm-up where the summary records none (the registered
    runs' runner did not give the detector its warm-up, so loss-onset's reference window was the first evaluations
    and the other rules that read a warm-up read none); and how many were so corrected."""
    corrected, count = [], 0
    for run in runs:
        if run.summary.get("warmup_steps") is None:
            warmup = found["families"][run.summary["task"]]["warmup"]
            run = scored_run({**run.summary, "warmup_steps": warmup}, run.name)  # type: ignore[assignment]
            count += 1
        corrected.append(run)
    return corrected, count


@functools.cache
def scored(path: Path = REGISTRATION, folder: Path = FOLDER) -> dict[str, Any]:
    """The registered warnings and forecasters on the registered runs, as registered; and, where summaries lack the
    warm-up, the same with the registered warm-up (``corrected``: a correction shown beside, never instead)."""
    found, runs = registration(path), registered_runs(path, folder)
    warnings = [*found["warnings"]["default"], *found["warnings"]["comparators"]]
    forecasters = [found["forecaster"]["default"], *found["forecast_comparators"]]

    def scores(chosen: Sequence[ScoredRun]) -> dict[str, Any]:
        return {"warnings": {as_registered(name): warning_scores(registered_rule(name), chosen) for name in warnings},
                "forecasts": {name: forecast_scores(registered_rule(name), chosen) for name in forecasters}}

    corrected, count = with_registered_warmup(runs, found)
    return {"registration": found, "runs": runs, **scores(runs),
            "corrected": {"runs": corrected, "count": count, **scores(corrected)} if count else None}


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
    for name in map(as_registered, found["warnings"]["default"]):
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
    lines = ["| run | acquisition | budget | acquired fully | first alert: probe-crossing / "
             f"{as_registered('study')} | CPU s |",
             "| --- | ---: | ---: | --- | --- | ---: |"]
    for run in sorted(runs, key=lambda r: r.name):
        alerts = {rule_name(alert["rule"]): alert["step"] for alert in reversed(run.summary.get("alerts") or [])
                  if alert.get("kind") == "run"}
        lines.append(f"| {Path(run.name).name.removesuffix('.json.gz')} | {run.acquisition or '-'} | "
                     f"{run.summary['max_steps']} | {'yes' if run.acquired_fully else 'no'} | "
                     f"{alerts.get('probe-crossing', '-')} / {alerts.get(RANKME_RECOVERY, '-')} | "
                     f"{run.summary['cpu_seconds']} |")
    return lines


def steady_forecasts(runs: Sequence[ScoredRun], name: str) -> list[dict[str, Any]]:
    """Per acquired run, the forecast ``name`` made where it began to forecast at every evaluation up to acquisition
    (before it, it said nothing or 'not within reach' at least once): when (share of the time to acquisition),
    whether its interval held the actual step, and its width relative to that step; share None where its last
    evaluation before acquisition had no forecast."""
    rule, found = registered_rule(name), []
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
    warnings = " ".join(rule_name(name) for name in [*found["warnings"]["default"], *found["warnings"]["comparators"]])
    forecasters = " ".join(s["forecasts"])
    return "\n".join([
        "# On a task nobody calibrated: the registered test on new task families", "",
        "Generated by `python -m study.phases.newtasks report`. The scores are "
        f"`python -m capgeo_callbacks.scoring study/corpus/newtasks --rules {warnings} "
        f"--forecasters {forecasters}`.", "",
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
        "## Targets (registered)", "", *target_lines(s), "",
        "## What a user can act on", "", act_on(runs, found["forecaster"]["default"]), "",
        "## Warnings", "", warning_table(list(s["warnings"].values())), "", *correction(s, "warnings", warning_table),
        "## Forecasts", "", forecast_table(list(s["forecasts"].values())), "",
        *correction(s, "forecasts", forecast_table), replay_sentence(runs), "", "## Cost", "", *cost_lines(runs), "",
        "## Where the runs were made", "", provenance_line(runs), ""])


def _corrected(s: dict[str, Any]) -> dict[str, Any]:
    return {**s, "warnings": s["corrected"]["warnings"], "forecasts": s["corrected"]["forecasts"]}


def target_lines(s: dict[str, Any]) -> list[str]:
    """The registered targets, measured and judged as registered; beside them, where the summaries lack the warm-up,
    the same with the registered warm-up (a correction)."""
    rows = targets(s)
    if not s["corrected"]:
        return ["| target | measured | verdict |", "| --- | --- | --- |", *[f"| {a} | {b} | {c} |" for a, b, c in rows]]
    fixed = targets(_corrected(s))
    return ["| target | measured | verdict | with the registered warm-up (a correction) |", "| --- | --- | --- | --- |",
            *[f"| {a} | {b} | {c} | " + ("the same" if (b, c) == (b2, c2) else f"{b2}: {c2}") + " |"
              for (a, b, c), (_, b2, c2) in zip(rows, fixed, strict=True)]]


def correction(s: dict[str, Any], kind: str, table: Any) -> list[str]:
    """What the ``kind`` (warnings or forecasts) score with the registered warm-up, beside the registered table."""
    fixed = s["corrected"]
    if not fixed:
        return []
    warmups = sorted({family["warmup"] for family in s["registration"]["families"].values()})
    changed = [name for name in s[kind] if table([s[kind][name]]) != table([fixed[kind][name]])]
    what = ", ".join(changed) or "none"
    if kind != "warnings":
        return [f"With the registered warm-up (as for the warnings), the forecasters that change: {what}.", "",
                *([table([fixed[kind][name] for name in changed]), ""] if changed else [])]
    return [f"{fixed['count']} of the {len(s['runs'])} summaries record no `warmup_steps` (the runner did not give "
            "the detector its warm-up; it does now), so the rules that read a warm-up read none. Scored again with "
            f"each family's registered warm-up ({', '.join(map(str, warmups))} steps, "
            "[`study/newtasks_registration.json`](../study/newtasks_registration.json)), a correction beside the "
            f"registered figures above, which stay as registered; the warnings that change: {what}.", "",
            *([table([fixed[kind][name] for name in changed]), ""] if changed else [])]


def replay_differences(runs: Sequence[ScoredRun], name: str) -> tuple[int, int]:
    """How many of the forecasts ``name`` recorded live on ``runs`` a replay of their summaries does not repeat (a
    different predicted step, or none), of how many."""
    from capgeo_callbacks.rules import replay

    differ = total = 0
    for run in runs:
        live = {int(entry["step"]): entry["predicted"] for entry in (run.summary.get("forecasts") or {}).get(name, [])}
        again = {forecast.step: forecast.predicted for forecast in replay(registered_rule(name), run.view)[1]}
        for step, predicted in live.items():
            total += 1
            repeated = again.get(step)
            differ += repeated is None or not (predicted == repeated or (predicted is None and math.isinf(repeated)))
    return differ, total


def replay_sentence(runs: Sequence[ScoredRun] | None = None, name: str = "acc-trend") -> str:
    """Whether a replay of the registered runs' summaries says what ``name`` said live, and why not."""
    runs = registered_runs() if runs is None else runs
    differ, total = replay_differences(runs, name)
    if not differ:
        return (f"A replay of the registered new-task runs' summaries repeats every one of the {total} {name} "
                "forecasts recorded live.")
    return ("A replay says what a rule said live when the summary holds the run facts the rule had live. The "
            "registered new-task runs' summaries gained `max_steps` at export, after the run: "
            f"{differ} of the {total} {name} forecasts recorded live on them differ from a replay (live, without a "
            "budget, a forecaster's reach was a multiple of the step so far; replayed, a multiple of the budget). "
            "Their scores ([newtasks.md](newtasks.md)) are the replay's; the runner now gives the detector the budget "
            "and the warm-up before the run.")


def provenance_line(runs: Sequence[ScoredRun]) -> str:
    """Where the registered runs were made, as their summaries say, and what they do not record."""
    seen = sorted({f"torch {run.summary.get('torch')}, {run.summary.get('threads')} thread(s)" for run in runs})
    return (f"As the summaries record it: {'; '.join(seen)}. " + unrecorded(
        {Path(run.name).name.removesuffix(".json.gz"): run.summary for run in runs})
            + " The export adds them since (`study.phases.corpus.made_on`).")


def readme(path: Path = REGISTRATION, folder: Path = FOLDER) -> str:
    """README.md's table: the default warnings and forecaster beside loss-onset and the comparator forecaster with
    the lowest error at 50%, with n and intervals; then what a user can act on."""
    s = scored(path, folder)
    found, runs = s["registration"], s["runs"]
    acquired = sum(run.acquisition is not None and not run.control for run in runs)
    lines = [f"| {len(found['families'])} new task families, {acquired} acquired runs, "
             f"{sum(run.control for run in runs)} controls | precision | false alarms on controls | "
             "forecast error at 50% | interval holds the step |", "| --- | --- | --- | --- | --- |"]
    for name in map(as_registered, [*found["warnings"]["default"], *found["warnings"]["comparators"]]):
        score = s["warnings"][name]
        lines.append(f"| {name} (warning) | {score['precision']} | {score['false_alarms_controls']} | | |")
        fixed = s["corrected"]["warnings"][name] if s["corrected"] else score
        if warning_table([fixed]) != warning_table([score]):
            lines.append(f"| {name} with the registered warm-up (a correction: the summaries lack it) | "
                         f"{fixed['precision']} | {fixed['false_alarms_controls']} | | |")
    half = {name: score["fractions"]["0.5"] for name, score in s["forecasts"].items()}
    best = min(found["forecast_comparators"], key=lambda name: (half[name]["median_error"], name))
    for name, role in ((found["forecaster"]["default"], "default forecast"), (best, "best comparator")):
        lines.append(f"| {name} ({role}) | | | {error_text(half[name])} (n={half[name]['n']}) | "
                     f"{half[name]['coverage']} |")
    return "\n".join([*lines, "", act_on(runs, found["forecaster"]["default"]) +
                      " Every registered target and comparator: [docs/newtasks.md](docs/newtasks.md)."])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("run", "report", "readme", "replay"))
    add_launch_arguments(parser, workers=1)
    args = parser.parse_args(argv)
    if args.command == "run":
        run_all(launch_args=args)
    elif args.command == "replay":
        print(replay_sentence())
    elif args.command == "report":
        DOC.write_text(page() + "\n")
        print(DOC.read_text())
    else:
        print(readme())


if __name__ == "__main__":
    main()
