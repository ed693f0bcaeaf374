"""The labelled corpus every warning and forecast is scored on: train.py runs in phases, resumable.

    python -m study.phases.corpus run --phases levels hard controls s --workers 2   # runs/corpus/<phase>/<run>/, on Ray
    python -m study.phases.corpus export                                     # -> study/corpus/<phase>/<run>.json.gz
    python -m study.phases.corpus labels                                     # labels, machines, cost: docs/corpus.md
    python -m study.phases.corpus provenance                                         # where each phase ran

Phases (the emergence issue's corpus; seeds 100 and up are the held-out test's and are refused here):

- ``hard``: every task's hard level on xs, seeds 0-2, with the default measures (RankMe, probes); each recorded
  until 8 evaluations after 0.9 has held (the calibration runs at the level's final setting are these runs).
- ``measures``: the hard level, seed 0, with every measure (gradient ranks, Hessian, LLC besides RankMe and probes).
- ``levels``: easy and medium on xs, seeds 0-1, likewise.
- ``controls``: the hard level with shuffled answers (nothing to learn) for the learnable tasks, seeds 0-1,
  to the end of the budget.
- ``s``: size ``s`` on the hard level of ``mod``, ``mul`` and two calibrated tasks, seeds 0-1.
- ``calibration-cpu``: the registered tasks' hard level, seeds 0-2, on the held-out runs' hardware (this CPU, one
  thread), each to the end of its budget (no ``--stop-when-learned``): the clock recomputed where the held-out
  runs were made, and whole runs that show whether an acquired run falls back late.

Calibration phases refuse a tree with uncommitted changes: their summaries must name the code they ran.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tasks
from capgeo_callbacks.run.summary import json_safe, read_summary
from capgeo_callbacks.sweeps import add_launch_arguments, launch_with, summary_of
from study.checkout import CORPUS, ROOT, require_clean_tree
from sweep import TrainTrial as Job
from tasks.budgets import budget

RUNS = ROOT / "runs" / "corpus"
HELD_OUT_SEEDS = 100  # seeds from here on belong to the pre-registered held-out test
CONTROL_TASKS = ("copy", "reverse", "compare", "add", "sort", "mul")  # learnable tasks with a shuffled twin
REGISTERED_TASKS = CONTROL_TASKS  # the held-out test's tasks (study/registration.json, "held_out")
SIZE_S_TASKS = ("mod", "sort", "copy", "mul")  # mul: "the floor rises with capacity" (docs/claims)
LEARNED = ("--stop-when-learned",)


def _job(phase: str, task: str, difficulty: str, seed: int, size: str = "xs", measures: str = "default",
         extra: Sequence[str] = ()) -> Job:
    if seed >= HELD_OUT_SEEDS:
        raise ValueError(f"seed {seed} is a held-out seed (>= {HELD_OUT_SEEDS}): the corpus calibrates on seeds "
                         f"below it; held-out runs go through python -m study.phases.heldout")
    suffix = "-shuffled" if "--shuffle-answers" in extra else ""
    name = f"{task}-{difficulty}-{size}-s{seed}{suffix}"
    argv = ("--task", task, "--difficulty", difficulty, "--size", size, "--seed", str(seed), "--measures",
            measures, *extra)
    return Job(name, argv, logdir=RUNS / phase,
               tags={"phase": phase, "task": task, "difficulty": difficulty, "seed": seed, "size": size})


def phase_jobs(phase: str) -> list[Job]:
    """The jobs of one phase, seed-major (every task's seed 0 first), so a partial phase covers every task."""
    if phase == "hard":
        return [_job(phase, task, "hard", seed, extra=LEARNED) for seed in (0, 1, 2) for task in tasks.TASKS]
    if phase == "measures":
        return [_job(phase, task, "hard", 0, measures="all", extra=LEARNED) for task in tasks.TASKS]
    if phase == "levels":
        return [_job(phase, task, difficulty, seed, extra=LEARNED)
                for seed in (0, 1) for difficulty in ("easy", "medium") for task in tasks.TASKS]
    if phase == "controls":
        return [_job(phase, task, "hard", seed, extra=("--shuffle-answers",))
                for seed in (0, 1) for task in CONTROL_TASKS]
    if phase == "calibration-cpu":
        return [_job(phase, task, "hard", seed) for seed in (0, 1, 2) for task in REGISTERED_TASKS]
    if phase == "s":
        return [_job(phase, task, "hard", seed, size="s", extra=LEARNED) for seed in (0, 1) for task in SIZE_S_TASKS]
    raise ValueError(f"unknown phase {phase!r}; valid: {', '.join(PHASES)}")


PHASES = ("hard", "measures", "levels", "controls", "s", "calibration-cpu")
CLEAN_PHASES = ("calibration-cpu",)  # phases whose runs must come from a committed tree


def exported(job: Job, corpus: Path = CORPUS) -> bool:
    """Whether the job's summary is already in the committed corpus (then it is not run again)."""
    return (corpus / job.tags["phase"] / f"{job.name}.json.gz").exists()


def at_final_level(summary: dict[str, Any]) -> bool:
    """Whether a run was made at its level's present parameters and budget (a calibration run at the chosen
    setting is a corpus run; one at another setting is not)."""
    task, difficulty = summary.get("task"), summary.get("difficulty")
    if task not in tasks.TASKS or difficulty not in tasks.DIFFICULTIES or summary.get("size") != "xs":
        return False
    level = budget(task, difficulty)
    return (summary.get("task_params") == tasks.TASK_PARAMS[task][difficulty]
            and summary.get("max_steps") == level.max_steps and summary.get("lr") == level.lr
            and summary.get("batch_size") == level.batch_size and not summary.get("shuffled_answers"))


def import_packed(folder: Path, corpus: Path = CORPUS) -> dict[str, int]:
    """File the summaries a device batch brought back (``<phase>/<...>/<run>.json.gz`` under ``folder``): every
    calibration run under ``study/corpus/calibration/<variant>/``, and those at their level's final setting also as
    the ``hard`` phase's runs; corpus phases to their own folders."""
    counts: dict[str, int] = {}
    for path in sorted(folder.rglob("*.json.gz")):
        summary = read_summary(path)
        phase = path.relative_to(folder).parts[0]
        targets = []
        if phase == "calibration":
            targets.append(corpus / "calibration" / path.parent.name / path.name)
            if at_final_level(summary) and summary.get("difficulty") == "hard":
                targets.append(corpus / "hard" / f"{summary['task']}-hard-xs-s{summary['seed']}.json.gz")
        elif phase == "corpus":
            targets.append(corpus / path.relative_to(folder / "corpus"))
        for target in targets:
            write_packed(summary, target)
            counts[target.parent.name] = counts.get(target.parent.name, 0) + 1
    return counts


def export(runs: Path = RUNS, corpus: Path = CORPUS) -> int:
    """Copy each finished run's summary, gzipped and compact, to ``study/corpus/<phase>/<run>.json.gz``."""
    count = 0
    for phase in PHASES:
        for job in phase_jobs(phase):
            summary = summary_of(Job(job.name, job.argv, logdir=runs / phase))
            if summary is None:
                continue
            write_packed(summary, corpus / phase / f"{job.name}.json.gz")
            count += 1
    return count


def write_packed(summary: dict[str, Any], path: Path) -> Path:
    """A summary as compact gzipped JSON (what the repository commits)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    summary = {key: value for key, value in summary.items() if key != "run_dir"}
    data = json.dumps(json_safe(summary), separators=(",", ":")).encode()
    path.write_bytes(gzip.compress(data, mtime=0))  # no time stamp: the same summary packs to the same bytes
    return path


def made_on(device: str) -> dict[str, Any]:
    """Where a run made outside train.py was made (train.py records its own), for its summary: the machine, the
    accelerator the trainer used (``device``: torch's name, ``cpu`` or ``cuda:0``) and the library versions."""
    import platform

    import lightning
    import torch

    accelerator = (torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda")
                   else f"cpu ({platform.processor() or platform.machine()})")
    versions = {"torch": str(torch.__version__), "lightning": str(lightning.__version__)}
    try:
        import transformers

        versions["transformers"] = str(transformers.__version__)
    except ImportError:
        pass
    return {"machine": f"{platform.node()} ({accelerator})", "accelerator": accelerator, **versions}


def function_summary(trial_dir: Path, commit: str) -> dict[str, Any]:
    """A training function's capgeo summary with what train.py records of itself, read from the function's own
    record ``run.json`` (the grokking example's): its settings and budget, CPU and wall seconds over every part,
    resumes and threads, and where it ran; ``commit`` is the clean checkout that launched it
    (:func:`~study.checkout.require_clean_tree`)."""
    [summary_path] = sorted(trial_dir.glob("**/capgeo_summary.json"))[-1:]
    summary = read_summary(summary_path)
    record = json.loads((trial_dir / "run.json").read_text())
    summary.update(settings=record["settings"], max_steps=int(record["settings"]["max_steps"]),
                   cpu_seconds=record["cpu_seconds"],
                   wall_seconds=round(sum(part["wall_seconds"] for part in record["parts"]), 1),
                   resumes=len(record["parts"]) - 1, threads=record["threads"],
                   omp_num_threads=record["omp_num_threads"], commit=commit, uncommitted_changes=False,
                   **made_on("cpu"))
    return summary


def trial_summary(trial: Any, commit: str) -> dict[str, Any] | None:
    """A finished trial's summary (None: not finished): a train.py run's as it wrote it, a training function's with
    what train.py records of itself (:func:`function_summary`)."""
    if trial.state()[0] != "finished":
        return None
    return function_summary(trial.root, commit) if trial.kind == "function" else summary_of(trial)


RECORDED = ("machine", "accelerator", "torch", "lightning", "cpu_seconds")  # what a summary says of where it ran


def unrecorded(summaries: dict[str, dict[str, Any]]) -> str:
    """Which of :data:`RECORDED` the named ``summaries`` lack, in words (nothing is filled in for them)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for field in RECORDED:
        names = tuple(name for name, summary in summaries.items() if summary.get(field) is None)
        if names:
            groups.setdefault(names, []).append(field)
    if not groups:
        return f"Each of the {len(summaries)} summaries records {', '.join(f'`{f}`' for f in RECORDED)}."
    return "Not recorded, and not filled in here: " + "; ".join(
        ", ".join(f"`{f}`" for f in fields) + " in " + (f"all {len(summaries)} summaries" if len(names) == len(
            summaries) else ", ".join(names)) for names, fields in groups.items()) + "."


def corpus_summaries(corpus: Path = CORPUS, phases: Sequence[str] = PHASES) -> list[tuple[str, dict[str, Any]]]:
    """``(phase, summary)`` of every committed run."""
    return [(phase, read_summary(path)) for phase in phases for path in sorted((corpus / phase).glob("*.json.gz"))]


LABEL_DOC = ROOT / "docs" / "corpus.md"


# Runs resumed before a run's CPU time was carried in its checkpoint (train.py RunCost): their cpu_seconds covers
# their last part only, and nothing in the summary says so (the source says how it is known)
PARTIAL_COST = {
    "controls/compare-hard-xs-s1-shuffled": "commit 510094a",
    "controls/copy-hard-xs-s1-shuffled": "commit 65845d2",
    "controls/reverse-hard-xs-s1-shuffled": "commit 65845d2",
    "heldout/add-hard-xs-s102": "issue 33: 89 CPU-s against 269-315 for its siblings",
    "heldout/sort-hard-xs-s101-shuffled": "issue 33: 46 CPU-s against about 365 for its siblings",
}
LABELLED_PHASES = ("calibration", *PHASES, "heldout")


def label_rows(corpus: Path = CORPUS) -> tuple[dict[str, Any], ...]:
    """One row per committed run of every phase: what it is, what it learned (its labels, recomputed), what it cost
    and where it ran; ``copy_of`` names the calibration run a ``hard`` run is a copy of (the calibration runs at a
    level's final setting are filed as the corpus' hard runs too). Computed once per folder and process."""
    return _label_rows(Path(corpus).resolve())


@functools.cache
def _label_rows(corpus: Path) -> tuple[dict[str, Any], ...]:
    rows = []
    digests: dict[str, str] = {}
    for phase in LABELLED_PHASES:
        for path in sorted((corpus / phase).rglob("*.json.gz")):
            s = read_summary(path)
            digest = hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest()
            name = path.name[:-len(".json.gz")]
            copy_of = digests.get(digest) if phase != "calibration" else None
            if phase == "calibration":
                digests.setdefault(digest, f"calibration/{path.parent.name}/{name}")
            labels = relabelled(s)
            holds = labels.get("holds") or {}
            rows.append({"phase": phase, "run": name, "task": s.get("task"),
                         "difficulty": s.get("difficulty"), "size": s.get("size"), "seed": s.get("seed"),
                         "shuffled": bool(s.get("shuffled_answers")), "max_acc": labels.get("max_acc"),
                         "at_0.5": holds.get("0.5") is not None, "at_0.6": holds.get("0.6") is not None,
                         "fully": bool(labels.get("acquired_fully")), "late": labels.get("late"),
                         "at_chance": labels.get("at_chance"), "outcome": labels.get("outcome"),
                         "exact_at_chance": exact_at_chance(s, labels), "copy_of": copy_of,
                         "cpu_seconds": s.get("cpu_seconds"), "resumes": s.get("resumes"),
                         "partial_cost": PARTIAL_COST.get(f"{phase}/{name}"), "machine": s.get("machine"),
                         **{key: s.get(key) for key in PROVENANCE}})
    return tuple(rows)


@functools.cache  # runs of one seed share a validation set: its chance level is computed once
def _chance(task: str, difficulty: str, params: str, shuffled: bool, datamodule: str) -> Any:
    """The present chance level of a validation set, given as ``relabelled`` reads it from a summary (JSON texts)."""
    from tasks.chance import chance_level

    return chance_level(tasks.make_datamodule(task, difficulty, params=json.loads(params), shuffle_answers=shuffled,
                                              **json.loads(datamodule)))


def relabelled(summary: dict[str, Any]) -> dict[str, Any]:
    """A run's labels, recomputed from its series with the present definitions; a run never acquired is held to
    the present chance level (tasks/chance.py), which can differ from the one it recorded when it ran."""
    from capgeo_callbacks.detection import DetectionSettings, label_run, split_points

    series = summary.get("series") or {}
    steps, acc = split_points([p for p in series.get("acc", []) if p[1] is not None])
    chance = None
    never = (summary.get("labels") or {}).get("acquisition_step") is None
    if summary.get("task") in tasks.TASKS and summary.get("datamodule") and never:
        datamodule = {k: v for k, v in summary["datamodule"].items() if k != "eval_batch_size"}
        chance = _chance(summary["task"], summary["difficulty"], json.dumps(summary.get("task_params"), sort_keys=True),
                         bool(summary.get("shuffled_answers")), json.dumps(datamodule, sort_keys=True))
    if chance is None and summary.get("chance"):
        from capgeo_callbacks.detection import Chance

        chance = Chance.from_dict(summary["chance"])
    align = lambda tag: [dict(map(tuple, series.get(tag, []))).get(step, float("nan")) for step in steps]  # noqa: E731
    return label_run(steps, acc, DetectionSettings.from_dict(summary.get("settings") or {}),
                     warmup_steps=summary.get("warmup_steps"), max_steps=summary.get("max_steps"), chance=chance,
                     token_acc=align("val/token_acc"), logprob=align("val/logprob")).to_dict()


def exact_at_chance(summary: dict[str, Any], labels: dict[str, Any]) -> bool | None:
    """Whether exact match alone stayed within the Wilson interval of the most frequent whole answer."""
    from capgeo_callbacks.detection.stats import wilson

    chance = summary.get("chance")
    if not chance or labels.get("max_acc") is None:
        return None
    top = wilson(round(chance["exact"] * chance["questions"]), chance["questions"])[1]  # type: ignore[index]
    return labels["max_acc"] <= top


def label_table(rows: Sequence[dict[str, Any]]) -> str:
    """The label table (Markdown): per phase the counts with Wilson intervals, the 0.5 / 0.6 agreement, and
    one line per run."""
    from capgeo_callbacks.scoring import Rate

    lines = ["| phase | runs | acquired at 0.5 | at 0.6 | fully | late (of acquired) | controls at chance | "
             "controls' exact match at chance | labels at 0.5 and 0.6 agree (acquired at either) |",
             "| --- | ---: | --- | --- | --- | --- | --- | --- | --- |"]
    for phase in dict.fromkeys(row["phase"] for row in rows):
        group = [row for row in rows if row["phase"] == phase]
        learn = [row for row in group if not row["shuffled"]]
        acquired = [row for row in learn if row["at_0.5"]]
        either = [row for row in learn if row["at_0.5"] or row["at_0.6"]]
        controls = [row for row in group if row["shuffled"]]
        lines.append(f"| {phase} | {len(group)} | {Rate(len(acquired), len(learn))} | "
                     f"{Rate(sum(r['at_0.6'] for r in learn), len(learn))} | "
                     f"{Rate(sum(r['fully'] for r in learn), len(learn))} | "
                     f"{Rate(sum(bool(r['late']) for r in acquired), len(acquired))} | "
                     f"{Rate(sum(bool(r['at_chance']) for r in controls), len(controls))} | "
                     f"{Rate(sum(bool(r['exact_at_chance']) for r in controls), len(controls))} | "
                     f"{Rate(sum(r['at_0.5'] == r['at_0.6'] for r in either), len(either))} |")
    lines += ["", "| phase | run | max acc | 0.5 | 0.6 | fully | late | at chance | outcome | CPU s | machine |",
              "| --- | --- | ---: | --- | --- | --- | --- | --- | --- | ---: | --- |"]
    mark = lambda value: "-" if value is None else ("yes" if value else "no")  # noqa: E731
    for row in rows:
        lines.append(f"| {row['phase']} | {row['run']} | {row['max_acc'] or 0:.3f} | {mark(row['at_0.5'])} | "
                     f"{mark(row['at_0.6'])} | {mark(row['fully'])} | {mark(row['late'])} | {mark(row['at_chance'])} | "
                     f"{row['outcome']} | {_cost_cell(row)} | {row['machine']} |")
    return "\n".join(lines)


def _cost_cell(row: dict[str, Any]) -> str:
    if row["cpu_seconds"] is None:
        return "not recorded"
    cell = f"{row['cpu_seconds']:.0f}"
    if row["partial_cost"]:
        return f"{cell} (last part only)"
    return cell + (f" ({row['resumes']} resumes, whole)" if row["resumes"] else "")


def _why_no_cost(row: dict[str, Any]) -> str:
    """Why a committed run carries no CPU time, and why it is not rerun to carry one."""
    if "NVIDIA" in str(row["machine"]):
        return ("made on the lent GPU machine, whose runner recorded no CPU time then; not rerun, since a rerun here "
                "would be another run on another machine, and the forecast pages were scored on this one")
    return "made before train.py recorded it"


def cost_table(rows: Sequence[dict[str, Any]]) -> str:
    """CPU hours per phase and machine, from what each run recorded; a ``hard`` run that is a copy of a calibration
    run is counted once (with the calibration), and a total that lacks some run's time says so."""
    tally: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        entry = tally.setdefault((row["phase"], str(row["machine"])),
                                 {"runs": 0, "copies": 0, "hours": 0.0, "short": 0})
        entry["runs"] += 1
        if row["copy_of"]:
            entry["copies"] += 1
            continue
        entry["hours"] += float(row["cpu_seconds"] or 0) / 3600
        entry["short"] += row["cpu_seconds"] is None or bool(row["partial_cost"])

    def hours(entry: dict[str, Any]) -> str:
        short = entry["short"]
        return f"{entry['hours']:.2f}" + (f" (at least: {short} run{'s' * (short > 1)} incomplete)" if short else "")

    lines = ["| phase | machine | runs | of them copies of calibration runs | CPU hours of the others |",
             "| --- | --- | ---: | ---: | --- |"]
    lines += [f"| {phase} | {machine} | {e['runs']} | {e['copies']} | {hours(e)} |"
              for (phase, machine), e in sorted(tally.items())]
    total = {key: sum(e[key] for e in tally.values()) for key in ("runs", "copies", "hours", "short")}
    lines.append(f"| all | | {total['runs']} | {total['copies']} | {hours(total)} |")
    lines += ["", f"{total['runs'] - total['copies']} distinct runs, {total['hours']:.1f} CPU-hours at least. "
              "Incomplete: " + "; ".join(
                  [f"{row['phase']}/{row['run']} (resumed before CPU time was carried in the checkpoint; known from "
                   f"{row['partial_cost']})" for row in rows if row["partial_cost"]]
                  + [f"{row['phase']}/{row['run']} (no `cpu_seconds` recorded: {_why_no_cost(row)})" for row in rows
                     if row["cpu_seconds"] is None and not row["copy_of"]]) + "."]
    return "\n".join(lines)


PROVENANCE = ("machine", "accelerator", "torch", "commit", "uncommitted_changes", "threads")


def provenance_table(rows: Sequence[dict[str, Any]]) -> str:
    """Where each phase ran, as its summaries record it: the machine, the accelerator the trainer chose, torch,
    the code's commit and whether the tree had uncommitted changes, the thread count."""
    groups: dict[tuple, int] = {}
    for row in rows:
        key = (row["phase"], *(row[field] for field in PROVENANCE))
        key = (*key[:4], (key[4] or "")[:8], *key[5:])
        groups[key] = groups.get(key, 0) + 1
    shown = lambda value: "not recorded" if value is None else ("yes" if value is True else (  # noqa: E731
        "no" if value is False else f"{value}"))
    lines = ["| phase | runs | machine (as recorded) | accelerator | torch | commit | uncommitted changes | threads |",
             "| --- | ---: | --- | --- | --- | --- | --- | --- |"]
    for key, n in groups.items():
        phase, machine, accelerator, torch_version, commit, dirty, threads = key
        lines.append(f"| {phase} | {n} | {shown(machine)} | {shown(accelerator)} | {shown(torch_version)} | "
                     f"`{commit or '-'}` | {shown(dirty)} | {shown(threads)} |")
    return "\n".join(lines)


def labels_page(corpus: Path = CORPUS) -> str:
    """docs/corpus.md: the labels, where each phase ran, what it cost, and every run."""
    rows = label_rows(corpus)
    counts, every = label_table(rows).split("\n\n")
    return ("# The corpus: what each run learned\n\nGenerated by `python -m study.phases.corpus labels` from the "
            "committed "
            "summaries (`study/corpus/<phase>/`); definitions in docs/design.md, \"Labels\".\n\n" + counts
            + "\n\n## Where each phase ran\n\n" + provenance_table(rows) + "\n\n" + PROVENANCE_NOTE
            + "\n\n## CPU cost\n\n" + cost_table(rows) + "\n\n## Every run\n\n" + every + "\n")


PROVENANCE_NOTE = (
    "A summary made before commit `ad0e877` names in `machine` the machine's GPU whenever it had one, whichever "
    "device the run trained on, and records neither the accelerator nor the thread count (\"not recorded\"); "
    "`hard` runs made on the GPU machine are the calibration runs at each level's final setting, filed twice. "
    "Runs made since record the accelerator the trainer chose, the thread count, and whether the tree was clean "
    "(from git, or from the launching machine where the checkout has none).")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run (or resume) phases")
    run.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    add_launch_arguments(run)
    run.add_argument("--nice", type=int, default=5, help="run at this niceness (the machine stays usable)")
    commands.add_parser("export", help="gzip finished summaries into study/corpus/")
    commands.add_parser("labels", help="the label table, where each phase ran and its CPU cost -> docs/corpus.md")
    commands.add_parser("provenance", help="where each phase ran, as its summaries record it")
    imports = commands.add_parser("import", help="file the summaries a device batch brought back")
    imports.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        os.nice(args.nice)
        for phase in args.phases:
            if phase in CLEAN_PHASES:
                require_clean_tree(f"phase {phase}")
            jobs = [job for job in phase_jobs(phase) if not exported(job)]
            print(f"== phase {phase}: {len(jobs)} runs not in the corpus yet", flush=True)
            launch_with(jobs, args, name=f"corpus-{phase}", storage=RUNS / ".engine",
                        on_outcome=lambda outcome: export())  # each summary into study/corpus/ as its run finishes
            print(f"{export()} runs exported to {CORPUS}", flush=True)
    elif args.command == "labels":
        LABEL_DOC.write_text(labels_page())
        print(LABEL_DOC.read_text()[:3000])
    elif args.command == "provenance":
        print(provenance_table(label_rows()))
    elif args.command == "import":
        print(import_packed(args.folder))
    elif args.command == "export":
        print(f"{export()} runs exported to {CORPUS}")


if __name__ == "__main__":
    main()
