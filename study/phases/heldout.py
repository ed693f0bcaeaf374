"""The pre-registered held-out test: seeds 100-102 of every hard task acquired on the calibration seeds, and their
shuffled-answer controls, run only under a committed registration (``study/registration.json``).

    python -m study.phases.heldout run --workers 2      # refuses without a committed registration
    python -m study.phases.heldout export               # -> study/corpus/heldout/<run>.json.gz
    python -m study.phases.heldout report               # -> docs/heldout.md

The held-out policy is the study's, applied here before any run reaches the scorer (which scores every run it is
given): each run records the registration's sha256 and the code commit (train.py ``--registration``, whose default
is :data:`REGISTRATION`); a held-out run (seed >= ``HELD_OUT_SEEDS``) is reported only when both match a registration
committed before it (:func:`study.registrations.policy.held_out_check`). ``run`` refuses a tree
with uncommitted changes, so the commit a run records is the code it ran.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from capgeo_callbacks.rules import rule_from_record
from capgeo_callbacks.sweeps import add_launch_arguments, launch_with, summary_of
from study.checkout import ROOT, require_clean_tree
from study.phases.corpus import CORPUS, HELD_OUT_SEEDS, write_packed
from study.registrations.forecast import REGISTRATION
from study.registrations.policy import as_registered, committed, held_out_check, registered_rule, sha256
from sweep import TrainTrial as Job

RUNS = ROOT / "runs" / "heldout"


def heldout_jobs(registration: Path = REGISTRATION) -> list[Job]:
    """Seed-major: every registered task's seed 100 and its control first."""
    if not registration.exists() or not committed(registration):
        raise SystemExit(f"no committed registration at {registration}: held-out seeds run only after the choice "
                         "is frozen (python -m study.registrations.forecast register, then commit it)")
    plan = json.loads(registration.read_text())["held_out"]
    jobs = []
    for seed in plan["seeds"]:
        for task in plan["tasks"]:
            common = ("--task", task, "--difficulty", plan["difficulty"], "--size", plan["size"], "--seed", str(seed),
                      "--registration", str(registration))
            jobs.append(Job(f"{task}-hard-xs-s{seed}", (*common, "--stop-when-learned"), logdir=RUNS,
                            tags={"seed": seed, "task": task}))
            jobs.append(Job(f"{task}-hard-xs-s{seed}-shuffled", (*common, "--shuffle-answers"), logdir=RUNS,
                            tags={"seed": seed, "task": task, "control": True}))
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


@functools.cache
def scored(registration: Path = REGISTRATION, folder: Path = CORPUS / "heldout") -> dict[str, Any]:
    """The registered rules and the frozen comparators scored on the held-out runs, once for every page and
    sentence that reads them: ``warnings`` and ``forecasts`` by rule name (registered first), each warning's first
    alert on each run (``alerts``), who will learn (``discrimination``: the AUROC table of every score), and the
    comparators fitted on calibration runs fitted again on the CPU calibration runs (``cpu_forecasts``; empty before
    there are any)."""
    from capgeo_callbacks.scoring import discrimination, first_alert, forecast_scores, load_runs, warning_scores
    from study.phases.calibration_cpu import cpu_runs, missing, refitted

    frozen = json.loads(registration.read_text())
    runs, dropped = held_out_check(load_runs(folder), registration)
    runs = [run for run in runs if run.seed is not None and run.seed >= HELD_OUT_SEEDS]
    compared = frozen["compared_with"]
    warnings_ = [rule_from_record(frozen["warning"])]
    warnings_ += [registered_rule(name, entry) for name, entry in compared["warnings"].items()]
    forecasters = [rule_from_record(frozen["forecaster"])]
    forecasters += [rule_from_record({**entry, "name": name})
                    for name, entry in compared["forecasters"].items()]
    alerts = {rule.name: {run.name: first_alert(rule, run.view) for run in runs} for rule in warnings_}
    warned = {rule.name: warning_scores(rule, runs, {name: None if alert is None else alert.step
                                                     for name, alert in alerts[rule.name].items()})
              for rule in warnings_}
    calibration, left = cpu_runs(), missing()
    return {"frozen": frozen, "runs": runs, "dropped": dropped, "alerts": alerts, "warnings": warned,
            "forecasts": {rule.name: forecast_scores(rule, runs) for rule in forecasters},
            "discrimination": discrimination(runs, {name: w["fired"] for name, w in warned.items()}, forecasters),
            "cpu_runs": calibration, "cpu_missing": left,  # a clock fitted on some tasks only would be no clock
            "cpu_forecasts": {name: forecast_scores(rule, runs) for name, rule in refitted(calibration).items()}
            if calibration and not left else {}}


def targets(s: dict[str, Any], forecasts: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The registered targets, each with what was measured and whether it was met; ``forecasts`` supplies the
    clock and the learning-curve extrapolators it is held to (the registered ones, or those fitted on the CPU)."""
    frozen = s["frozen"]
    w = s["warnings"][frozen["warning"]["name"]]
    error = s["forecasts"][frozen["forecaster"]["name"]]["fractions"]["0.5"]["median_error"]
    clock_error = forecasts["clock"]["fractions"]["0.5"]["median_error"]
    extrapolators = [forecasts[name]["fractions"]["0.5"]["median_error"]
                     for name in ("logprob-threshold-calibrated", "curve-families") if name in forecasts]
    best_other = min((e for e in extrapolators if e is not None), default=math.inf)
    # a target on nothing measured is missed, never met by default
    return [
        ("warning precision >= 0.8", str(w["precision"]), (w["precision"].value or 0) >= 0.8),
        ("warning recall >= 0.8", str(w["recall"]), (w["recall"].value or 0) >= 0.8),
        ("median lead >= 20% of the time to acquisition", _num(w["lead_share"]["median"]),
         (w["lead_share"]["median"] or 0) >= 0.2),
        (f"forecast error at 50% <= half the clock's ({_num(clock_error)})", _num(error),
         error is not None and clock_error is not None and error <= 0.5 * clock_error),
        (f"... and no worse than the best learning-curve extrapolator ({_num(best_other)})", _num(error),
         error is not None and error <= best_other),
    ]


def _target_table(rows: list[tuple[str, str, bool]]) -> str:
    return "\n".join(["| target | measured | met |", "| --- | --- | --- |",
                      *[f"| {name} | {measured} | {_met(met)} |" for name, measured, met in rows]])


def _short(run: Any) -> str:
    """``copy s100`` for a run's file name."""
    return f"{run.summary.get('task')} s{run.seed}" + (" shuffled" if run.summary.get("shuffled_answers") else "")


def late_alerts(s: dict[str, Any]) -> str:
    """The alerts made at or after acquisition, which are no warning (docs/design.md, "The warning's record"),
    with what each rule's precision was first reported as when they were counted."""
    parts = []
    for rule, by_run in s["alerts"].items():
        late = [(run, by_run[run.name]) for run in s["runs"] if by_run[run.name] is not None
                and run.acquisition is not None and by_run[run.name].step >= run.acquisition]
        if late:
            precision = s["warnings"][rule]["precision"]
            parts.append(f"{rule} on " + ", ".join(f"{_short(run)} (at step {alert.step:,}, acquired at "
                                                  f"{run.acquisition:,})" for run, alert in late)
                         + f": precision {precision.k}/{precision.n}, first reported as {precision.k}/"
                         f"{precision.n + len(late)} when they were counted")
    if not parts:
        return "No rule alerted at or after acquisition."
    return "Alerts at or after acquisition warn of nothing and are not counted: " + "; ".join(parts) + "."


def scope(s: dict[str, Any]) -> str:
    """What the held-out test covers: its tasks' own calibration verdicts, where the registered warning's false
    alarms fall, and how many acquisitions are late."""
    from capgeo_callbacks.detection import DetectionSettings, label_run
    from capgeo_callbacks.run.summary import read_summary
    from study.phases.calibration import Variant, verdict
    from tasks.budgets import budget

    frozen = s["frozen"]
    tasks_ = frozen["held_out"]["tasks"]
    failed = {}
    for task in tasks_:
        seeds = [read_summary(path) for path in sorted((CORPUS / "hard").glob(f"{task}-hard-xs-s[0-9].json.gz"))]
        found = verdict(Variant(task, budget(task, "hard").max_steps), seeds)
        if found != "pass":
            failed[task] = found
    warning = frozen["warning"]["name"]
    fired = s["warnings"][warning]["fired"]
    false_alarms = [run for run in s["runs"] if fired[run.name] is not None and run.acquisition is None]
    on_failed = [run for run in false_alarms if run.summary.get("task") in failed]
    acquired = [run for run in s["runs"] if run.acquisition is not None and not run.control]
    not_late = []
    for run in acquired:
        summary = run.summary
        labels = label_run(list(run.view.steps), list(run.view.values("acc")),
                           DetectionSettings.from_dict(summary.get("settings") or {}),
                           warmup_steps=summary.get("warmup_steps"), max_steps=summary.get("max_steps"))
        if labels.late is False:
            not_late.append(run)
    reasons: dict[str, list[str]] = {}
    for task, why in failed.items():
        reasons.setdefault(why, []).append(task)
    return (f"{len(failed)} of the {len(tasks_)} held-out tasks failed the project's own calibration of a hard "
            "level (every calibration seed acquired fully and late, docs/design.md, \"Labels\"): "
            + "; ".join(f"{', '.join(tasks_of)} ({why})" for why, tasks_of in reasons.items()) + "; "
            + (f"every one of the registered warning's {len(false_alarms)} false alarms is on them"
               if false_alarms and len(on_failed) == len(false_alarms) else
               f"{len(on_failed)} of the registered warning's {len(false_alarms)} false alarms are on them")
            + f"; and {len(not_late)} of the {len(acquired)} held-out acquisitions are not late ("
            + ", ".join(_short(run) for run in not_late) + ").")


def machines(s: dict[str, Any]) -> str:
    """Where the runs the registration was fitted on, and the held-out runs, were made (as their summaries say)."""
    from capgeo_callbacks.run.summary import read_summary

    selection = [read_summary(CORPUS / ("controls" if name.endswith("-shuffled.json.gz") else "hard") / name)
                 for name in s["frozen"]["selection"]["runs"]]
    fitted = [summary for summary in selection if summary.get("task") in s["frozen"]["held_out"]["tasks"]
              and not summary.get("shuffled_answers")]
    return (f"The registered comparators that are fitted (the clock, the calibrated thresholds) were fitted on "
            f"calibration runs made on {_where(fitted)}; the held-out runs were made on "
            f"{_where([run.summary for run in s['runs']])}.")


def device(machine: str | None) -> str:
    """The device a summary's ``machine`` names, without the host: ``host (NVIDIA H200)`` -> ``NVIDIA H200``,
    ``host (cpu (x86_64))`` -> ``CPU``."""
    found = re.search(r"\((.*)\)\s*$", machine or "")
    inner = found.group(1) if found else (machine or "an unrecorded machine")
    return "CPU" if inner.startswith("cpu") else inner


def _where(summaries: list[dict[str, Any]]) -> str:
    seen: dict[tuple, int] = {}
    for summary in summaries:
        key = (summary.get("machine"), summary.get("torch"), (summary.get("commit") or "")[:8],
               summary.get("uncommitted_changes"))
        seen[key] = seen.get(key, 0) + 1
    return " and ".join(f"{device(machine)} with torch {torch_version} at `{commit}`"
                        + (", uncommitted changes" if dirty else (", a clean tree" if dirty is False else ""))
                        + f" ({n} runs)" for (machine, torch_version, commit, dirty), n in seen.items())


def report(registration: Path = REGISTRATION, folder: Path = CORPUS / "heldout") -> str:
    """The registered warning and forecaster on the held-out runs, exactly as registered, beside the frozen
    comparators; each target met or missed; then the comparators fitted on calibration runs fitted again on the
    held-out runs' hardware, and the targets against those."""
    from capgeo_callbacks.scoring import forecast_table, warning_table
    from study.phases.calibration_cpu import PHASE

    s = scored(registration, folder)
    frozen, runs, dropped = s["frozen"], s["runs"], s["dropped"]
    warning, forecaster = frozen["warning"]["name"], frozen["forecaster"]["name"]
    lines = [
        "# The pre-registered held-out test", "",
        "Generated by `python -m study.phases.heldout report` from `study/corpus/heldout/` and the committed "
        "registration "
        f"`study/registration.json` (sha256 `{json.dumps(sha256(registration))[1:-1]}`, registered "
        f"{frozen['registered']} at commit `{frozen['code_commit'][:10]}`). Each run below was made with code that "
        "already held that file and records its hash; "
        f"{len(runs)} runs kept ({sum(r.acquisition is not None and not r.control for r in runs)} acquired, "
        f"{sum(r.acquired_fully and not r.control for r in runs)} fully, {sum(r.control for r in runs)} controls, "
        f"{sum(r.acquisition is None and not r.control for r in runs)} never acquired), {len(dropped)} left out"
        + (": " + "; ".join(dropped) if dropped else "") + ".", ""]
    if runs:
        lines += ["## Scope", "", scope(s), "", machines(s), ""]
    lines += [
        f"## The warning: `{warning}` (registered), beside the frozen comparators", "",
        warning_table(list(s["warnings"].values())), "", late_alerts(s), "",
        f"## The forecast: `{forecaster}` (registered), beside the frozen comparators", "",
        forecast_table(list(s["forecasts"].values())), "", "## Targets", "", _target_table(targets(s, s["forecasts"])),
        "", "## Who will learn", "", who_will_learn(s), "",
        "## The comparators fitted on the held-out runs' hardware", ""]
    if not s["cpu_forecasts"]:
        return "\n".join(lines + [
            f"Not yet: `study/corpus/{PHASE}/` holds {len(s['cpu_runs'])} of "
            f"{len(s['cpu_runs']) + len(s['cpu_missing'])} "
            f"runs (not yet run: {', '.join(s['cpu_missing'])}); the comparators are fitted again, and scored "
            "here, once every task's seeds are in ([calibration/cpu.md](calibration/cpu.md))."]) + "\n"
    lines += [f"The clock and the calibrated log-prob threshold fitted, by the same code, on `study/corpus/{PHASE}/` "
              "(the "
              f"registered tasks' calibration seeds run on this CPU, one thread, {len(s['cpu_runs'])} runs), beside "
              "the registered ones; the registered figures above stay as registered "
              "([calibration/cpu.md](calibration/cpu.md))." + _unclocked(s), "",
              forecast_table([s["forecasts"][forecaster], *[s["forecasts"][name] for name in s["cpu_forecasts"]],
                              *s["cpu_forecasts"].values()]), "",
              "Targets with the comparators fitted on this CPU:", "",
              _target_table(targets(s, {**s["forecasts"], **s["cpu_forecasts"]}))]
    return "\n".join(lines) + "\n"


def who_will_learn(s: dict[str, Any]) -> str:
    """The AUROC table on the held-out runs (``python -m capgeo_callbacks.scoring``'s), beside the precision above:
    scored after the test, no registered target."""
    from capgeo_callbacks.scoring import LEGEND, discrimination_table

    return ("Not a registered target (the scorer measured it only after this test was registered). "
            "Precision above counts the runs an alert preceded; here, whether a score ranks the runs that will "
            f"acquire above those that will not. {LEGEND}\n\n" + discrimination_table(s["discrimination"]))


def brief(registration: Path = REGISTRATION, folder: Path = CORPUS / "heldout") -> str:
    """The README's first screen: what the held-out test covers, the registered warning and forecast beside the
    clock and the loss-only rules, and the verdict on each registered target."""
    s = scored(registration, folder)
    frozen, runs = s["frozen"], s["runs"]
    acquired = sum(r.acquisition is not None and not r.control for r in runs)
    seeds = sorted({run.seed for run in runs})
    chosen_on = sorted({int(re.search(r"-s(\d+)", name).group(1)) for name in frozen["selection"]["runs"]})
    lines = [f"Chosen on calibration seeds {chosen_on[0]}-{chosen_on[-1]} and frozen in "
             "[`study/registration.json`](study/registration.json) before the held-out runs existed, then run on "
             f"seeds {seeds[0]}-{seeds[-1]} of the "
             f"{len(frozen['held_out']['tasks'])} hard tasks the smallest model learned on those seeds and their "
             f"shuffled-answer controls: {len(runs)} runs, of which {acquired} reached 0.5 accuracy "
             f"({sum(r.acquired_fully and not r.control for r in runs)} of them fully), "
             f"{sum(r.acquisition is None and not r.control for r in runs)} never did and "
             f"{sum(r.control for r in runs)} are controls ([docs/heldout.md](docs/heldout.md)). {scope(s)} "
             "Where each set of runs was made: [docs/heldout.md](docs/heldout.md).", ""]
    lines += ["| warning | precision | recall | false alarms on controls | median lead (share of the time to "
              "acquisition) |", "| --- | --- | --- | --- | --- |"]
    notes = {frozen["warning"]["name"]: " (registered)", as_registered("study"): " (RankMe collapse)",
             "loss-onset": " (loss only)", "clock-20": " (a clock)"}
    for name, note in notes.items():
        w = s["warnings"][name]
        lead = w["lead_share"]["median"]
        late = sum(alert is not None and run.acquisition is not None and alert.step >= run.acquisition
                   for run in runs if (alert := s["alerts"][name][run.name]) is not None)
        precision = str(w["precision"]) + (f" ({w['precision'].k}/{w['precision'].n + late} as first reported: "
                                           f"{late} alerts after acquisition counted)" if late else "")
        label = f"**{name}**{note}" if note == " (registered)" else f"{name}{note}"
        lines.append(f"| {label} | {precision} | {w['recall']} | {w['false_alarms_controls']} | "
                     f"{'-' if lead is None else f'{lead:.2f}'} |")
    forecaster = frozen["forecaster"]["name"]
    rows = [(f"**{forecaster}** (registered)", s["forecasts"][forecaster]),
            ("clock (registered: median of the calibration seeds, GPU machine)", s["forecasts"]["clock"])]
    if s["cpu_forecasts"]:
        rows.append(("clock fitted on the same seeds run on this CPU", s["cpu_forecasts"]["clock"]))
    rows += [("curve-families (Domhan et al.)", s["forecasts"]["curve-families"]),
             ("logprob-threshold-calibrated (loss threshold, Du et al.)",
              s["forecasts"]["logprob-threshold-calibrated"])]
    lines += ["", "| forecast of the acquisition step | median error at half the time to acquisition [95%] | runs "
              "never acquired whose last forecast is 'not within reach' |", "| --- | --- | --- |"]
    for label, scores in rows:
        half = scores["fractions"]["0.5"]
        median, interval = half["median_error"], half["interval"]
        text = "-" if median is None else ("none" if math.isinf(median) else f"{median:.2f}")
        if interval and median is not None and math.isfinite(median):
            text += f" [{interval[0]:.2f}, {interval[1]:.2f}]"
        lines.append(f"| {label} | {text} (n={half['n']}) | {scores['never_acquired_beyond']} |")
    met = targets(s, s["forecasts"])
    verdicts = {name.split(" (")[0]: ok for name, _, ok in met}
    lines += ["", "Error is |predicted - actual| / actual; \"none\": it put acquisition out of reach until it "
              "happened. Reported as registered, nothing re-chosen: the registered warning "
              + ("meets" if verdicts["warning precision >= 0.8"] else "misses") + " the precision target and "
              + ("meets" if verdicts["warning recall >= 0.8"] else "misses") + " recall, and its lead "
              + ("meets" if verdicts["median lead >= 20% of the time to acquisition"] else "misses")
              + " its target; the registered forecast "
              + ("beats" if verdicts["forecast error at 50% <= half the clock's"] else "is **no better than**")
              + " the registered clock" + _cpu_verdict(s) + " (targets: [docs/heldout.md](docs/heldout.md))."]
    return "\n".join(lines)


def _unclocked(s: dict[str, Any]) -> str:
    """The tasks the CPU clock has no step for (no calibration seed reached 0.5 on the CPU)."""
    from study.phases.calibration_cpu import refitted

    registered = s["frozen"]["compared_with"]["forecasters"]["clock"]["settings"]["table"]
    cpu = refitted(s["cpu_runs"])["clock"].settings()["table"]
    missing = sorted(set(registered) - set(cpu))
    if not missing:
        return ""
    return (f" The CPU clock has no step for {', '.join(missing)}: no calibration seed reached 0.5 there on this "
            "CPU, so it never forecasts those held-out runs (an infinite error).")


def _cpu_verdict(s: dict[str, Any]) -> str:
    if not s["cpu_forecasts"]:
        return ""
    met = dict((name.split(" (")[0], ok) for name, _, ok in targets(s, {**s["forecasts"], **s["cpu_forecasts"]}))
    return (" and " + ("beats" if met["forecast error at 50% <= half the clock's"] else "is no better than")
            + " the clock fitted on the CPU calibration seeds")


def warmup_dips(phases: Sequence[str] = ("hard", "controls", "heldout")) -> dict[str, Any]:
    """How far every layer's RankMe falls inside the warm-up (from the highest value before its lowest there), in
    every run of ``phases``: the runs, the smallest such fall, and how many acquired runs recover before acquisition
    (verdict ``precursor``)."""
    from capgeo_callbacks.run.summary import read_summary
    from study.phases.ablation import troughs

    drops, acquired, precursors = [], 0, 0
    for phase in phases:
        for path in sorted((CORPUS / phase).glob("*.json.gz")):
            summary = read_summary(path)
            drops.append(min(drop for _, _, drop in troughs(summary, summary["warmup_steps"]).values()))
            if summary.get("acquisition_step") is not None:
                acquired += 1
                precursors += summary.get("verdict") == "precursor"
    return {"phases": tuple(phases), "runs": len(drops), "least_drop": min(drops), "acquired": acquired,
            "precursors": precursors}


def early_collapse(phases: Sequence[str] = ("hard", "controls", "heldout")) -> str:
    """:func:`warmup_dips` in words."""
    found = warmup_dips(phases)
    return (f"In each of the {found['runs']} runs of the {', '.join(phases)} phases, shuffled-answer controls "
            f"included, every layer's RankMe falls by at least {found['least_drop']:.0%} of its peak inside the "
            f"learning-rate warm-up; {found['precursors']} of the {found['acquired']} that go on to acquire recover "
            "before they do.")


def study_rule(registration: Path = REGISTRATION, folder: Path = CORPUS / "heldout") -> str:
    """What the study's rule says on the held-out runs and on the controls of the calibration seeds."""
    from capgeo_callbacks.scoring import first_alert, load_runs

    s = scored(registration, folder)
    frozen, runs = s["frozen"], s["runs"]
    study, registered = s["warnings"][as_registered("study")], s["warnings"][frozen["warning"]["name"]]
    rang_on = s["alerts"][as_registered("study")]
    controls = [run for run in runs if run.control]
    never = [run for run in runs if run.acquisition is None and not run.control]
    rule = rule_from_record({**frozen["compared_with"]["warnings"]["study"], "name": "study"})
    calibration_controls = [(folder_name, run) for folder_name in ("hard", "controls")
                            for run in load_runs(CORPUS / folder_name) if run.control and (run.seed or 0) < 100]
    rang = [(folder_name, run, alert) for folder_name, run in calibration_controls
            if (alert := first_alert(rule, run.view)) is not None]
    precise = ("as precise as" if study["precision"].value == registered["precision"].value else
               "more precise than" if (study["precision"].value or 0) > (registered["precision"].value or 0) else
               "less precise than")
    earlier = (study["lead_share"]["median"] or 0) > (registered["lead_share"]["median"] or 0)
    onset = study["lead_over_onset"]["median"]
    return (early_collapse() + f" On the held-out runs the study's rule is {precise} the registered warning "
            f"({study['precision']} against {registered['precision']}) and rings {'earlier' if earlier else 'later'} "
            "(a median "
            f"{study['lead_share']['median']:.2f} of the time to acquisition before it, against "
            f"{registered['lead_share']['median']:.2f}), a median {onset:.0f} steps "
            f"{'before' if onset >= 0 else 'after'} the answer's log-prob starts to rise. It rang on "
            f"{sum(rang_on[run.name] is not None for run in controls)} of the {len(controls)} held-out "
            f"controls, but on {len(rang)} of the {len(calibration_controls)} controls of the calibration seeds ("
            + ", ".join(f"{folder_name}/{Path(run.name).name.removesuffix('.json.gz')} at step {alert.step:,}, "
                        f"{alert.layer} first" for folder_name, run, alert in rang)
            + f"), and on {sum(rang_on[run.name] is not None for run in never)} of the {len(never)} "
            "held-out runs that never reach 0.5: it says a run has started learning, not that a capability is "
            "coming.")


def _met(value: bool) -> str:
    return "yes" if value else "**no**"


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return "none (never forecast)" if value == float("inf") else f"{value:.3f}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run")
    add_launch_arguments(run)
    run.add_argument("--nice", type=int, default=0)
    commands.add_parser("export")
    commands.add_parser("report", help="the registered choice on the held-out runs -> docs/heldout.md")
    commands.add_parser("brief", help="the README's first screen: scope, the small tables, the verdict")
    commands.add_parser("study-rule", help="what the study's rule says on held-out runs and calibration controls")
    args = parser.parse_args(argv)
    if args.command == "brief":
        print(brief())
        return
    if args.command == "study-rule":
        print(study_rule())
        return
    if args.command == "report":
        DOC.write_text(report())
        print(DOC.read_text())
        return
    if args.command == "run":
        require_clean_tree("the held-out test")  # each run must name the code it ran
        os.nice(args.nice)
        jobs = heldout_jobs()
        done = [job for job in jobs if (CORPUS / "heldout" / f"{job.name}.json.gz").exists()]
        launch_with([job for job in jobs if job not in done], args, name="heldout", storage=RUNS / ".engine",
                    on_outcome=lambda outcome: export())
    print(f"{export()} held-out runs exported to {CORPUS / 'heldout'}")


if __name__ == "__main__":
    main()
