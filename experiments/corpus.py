"""The labelled corpus the warning is measured on: every task and level on xs, several seeds, hard on s, and
negative controls, each a train.py run at its default budget, stopped a few evaluations after acquisition.

    python experiments/corpus.py run --phases hard medium easy controls s --jobs 2   # resumable
    python experiments/corpus.py export                                              # -> corpus/
    python experiments/corpus.py cost                                                # CPU hours per phase
    python experiments/corpus.py table                                               # acquisition per seed

``run`` goes through sweep.py, so an interrupted corpus picks up where it stopped: finished runs are skipped,
unfinished ones resume from their last checkpoint. ``export`` copies each finished run's summary (its series
included) gzipped into ``corpus/<run>/capgeo_summary.json.gz``, what the repository commits and
``python -m capgeo_callbacks.evaluate corpus`` and ``python -m capgeo_callbacks.report corpus`` read.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sweep  # noqa: E402
import tasks  # noqa: E402
from capgeo_callbacks.report import find_runs  # noqa: E402
from capgeo_callbacks.summary import SUMMARY_FILENAME, json_safe  # noqa: E402
from tasks.budgets import budget  # noqa: E402

RUNS = ROOT / "runs" / "corpus"
CORPUS = ROOT / "corpus"
STOP = ["--stop-after-acquisition"]  # sweep.py's flag: a run acquired counts as finished (train.py keeps 8 more evals)
# tasks whose hard level is a shuffled-answer control (nothing to learn): one short and one long answer
CONTROL_TASKS = ("copy", "sort", "mod")

# phase -> (difficulties, sizes, seeds, tasks, extra train.py arguments)
PHASES: dict[str, tuple[list[str], list[str], list[int], Sequence[str], list[str]]] = {
    "hard": (["hard"], ["xs"], [0, 1, 2], tasks.TASKS, ["--measures", "all"]),
    "medium": (["medium"], ["xs"], [0, 1, 2], tasks.TASKS, []),
    "easy": (["easy"], ["xs"], [0], tasks.TASKS, []),  # acquired quickly: one seed (the issue asks at least one)
    "controls": (["hard"], ["xs"], [0], CONTROL_TASKS, ["--measures", "all", "--shuffle-answers"]),
    "s": (["hard"], ["s"], [0], tasks.TASKS, ["--measures", "all"]),
}


def run(phases: Sequence[str], jobs: int, dry_run: bool, only: Sequence[str] | None = None, threads: int = 1) -> None:
    for phase in phases:
        difficulties, sizes, seeds, names, extra = PHASES[phase]
        names = [name for name in names if only is None or name in only]
        if not names:
            continue
        logdir = RUNS / phase
        argv = ["--tasks", *names, "--difficulties", *difficulties, "--sizes", *sizes, "--seeds",
                *map(str, seeds), "--logdir", str(logdir), "--jobs", str(jobs), "--threads", str(threads)]
        argv += STOP if phase != "controls" else []
        argv += ["--extra-args", *extra] if extra else []
        if dry_run:
            argv.insert(0, "--dry-run")
        print(f"== phase {phase}: python sweep.py {' '.join(argv)}", flush=True)
        sweep.main(argv)


def current(summary: dict) -> bool:
    """Whether a run was made with the level's present parameters and budget (a recalibrated level makes
    its older runs stale: they are not exported)."""
    task, difficulty = summary.get("task"), summary.get("difficulty")
    return (summary.get("task_params") == tasks.TASK_PARAMS[task][difficulty]
            and summary.get("max_steps") == budget(task, difficulty).max_steps)


def finished(summary: dict) -> bool:
    """A run that reached its budget, or stopped after acquisition."""
    steps, end = summary.get("steps"), summary.get("stop_at_step") or summary.get("max_steps")
    return summary.get("acquisition_step") is not None or (steps is not None and end is not None and steps >= end)


def export() -> None:
    count = 0
    for record in find_runs(RUNS):
        if not finished(record.summary):
            continue
        if not current(record.summary):
            print(f"stale (made before its level was recalibrated), not exported: {record.name}")
            continue
        phase = record.name.split("/", 1)[0]
        target = CORPUS / phase / record.name.split("/")[-1] / (SUMMARY_FILENAME + ".gz")
        target.parent.mkdir(parents=True, exist_ok=True)
        summary = {key: value for key, value in record.summary.items() if key != "run_dir"}
        with gzip.open(target, "wt") as handle:
            json.dump(json_safe(summary), handle, separators=(",", ":"))
        count += 1
    size = sum(path.stat().st_size for path in CORPUS.rglob("*.gz"))
    print(f"{count} runs exported to {CORPUS} ({size / 1e6:.1f} MB)")


def cost(folder: Path) -> None:
    """CPU hours and wall hours per phase and level, from what the runs recorded."""
    rows: dict[tuple[str, str, str], list[float]] = {}
    for record in find_runs(folder):
        s = record.summary
        key = (record.name.split("/", 1)[0], str(s.get("difficulty")), str(s.get("size")))
        tally = rows.setdefault(key, [0, 0.0, 0.0])
        tally[0] += 1
        tally[1] += float(s.get("cpu_seconds") or 0.0) / 3600
        tally[2] += float(s.get("wall_seconds") or 0.0) / 3600
    print("| phase | difficulty | size | runs | CPU hours | wall hours (one thread each) |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    total = [0, 0.0, 0.0]
    for (phase, difficulty, size), (n, cpu, wall) in sorted(rows.items()):
        print(f"| {phase} | {difficulty} | {size} | {n} | {cpu:.2f} | {wall:.2f} |")
        total = [total[0] + n, total[1] + cpu, total[2] + wall]
    print(f"| all | | | {total[0]} | {total[1]:.2f} | {total[2]:.2f} |")


def table(folder: Path) -> None:
    """Task x level x seed on xs: the acquisition step (and its share of the budget), the budget and the
    wall time of each run (the README's calibration table). Shuffled-answer controls are left out."""
    cells: dict[tuple[str, str], dict[int, dict]] = {}
    for record in find_runs(folder):
        s = record.summary
        if s.get("size") != "xs" or s.get("shuffled_answers"):
            continue
        cells.setdefault((str(s["task"]), str(s["difficulty"])), {})[int(s["seed"])] = s
    seeds = sorted({seed for runs in cells.values() for seed in runs})
    print("| task | level | budget | " + " | ".join(f"seed {seed}: acquired at (wall)" for seed in seeds)
          + " | late (after 20%) |")
    print("| --- | --- | ---: | " + " | ".join("---" for _ in seeds) + " | --- |")
    order = {name: i for i, name in enumerate(tasks.TASKS)}
    levels = {"easy": 0, "medium": 1, "hard": 2}
    for (task, level), runs in sorted(cells.items(), key=lambda kv: (order[kv[0][0]], levels[kv[0][1]])):
        max_steps = budget(task, level).max_steps
        row, late = [], 0
        for seed in seeds:
            s = runs.get(seed)
            if s is None:
                row.append("—")
                continue
            wall = f"{float(s.get('wall_seconds') or 0) / 60:.1f} min"
            step = s.get("acquisition_step")
            if step is None:
                row.append(f"not acquired in {s.get('steps')} ({wall})")
            else:
                late += step > 0.2 * max_steps
                row.append(f"{step} ({step / max_steps:.0%}; {wall})")
        control = budget(task, level).negative_control
        verdict = "negative control" if control else f"{late} of {len(runs)}"
        print(f"| `{task}` | {level} | {max_steps:,} | " + " | ".join(row) + f" | {verdict} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="run (or resume) phases of the corpus")
    run_parser.add_argument("--phases", nargs="+", choices=list(PHASES), default=list(PHASES))
    run_parser.add_argument("--jobs", type=int, default=2)
    run_parser.add_argument("--dry-run", action="store_true")
    run_parser.add_argument("--tasks", nargs="+", choices=tasks.TASKS, help="only these tasks")
    run_parser.add_argument("--threads", type=int, default=1, help="torch threads per run (one: runs share nothing)")
    commands.add_parser("export", help="copy finished summaries, gzipped, into corpus/")
    cost_parser = commands.add_parser("cost", help="CPU hours per phase and level")
    cost_parser.add_argument("folder", nargs="?", default=str(CORPUS))
    table_parser = commands.add_parser("table", help="acquisition step per task, level and seed (xs)")
    table_parser.add_argument("folder", nargs="?", default=str(CORPUS))
    args = parser.parse_args()
    if args.command == "run":
        run(args.phases, args.jobs, args.dry_run, args.tasks, args.threads)
    elif args.command == "export":
        export()
    elif args.command == "table":
        table(Path(args.folder))
    else:
        cost(Path(args.folder))


if __name__ == "__main__":
    main()
