"""The labelled corpus every warning and forecast is scored on: train.py runs in phases, resumable.

    python -m study.corpus run --phases levels hard controls s --workers 2   # runs/corpus/<phase>/<run>/
    python -m study.corpus export                                             # -> corpus/<phase>/<run>.json.gz
    python -m study.corpus labels                                             # the label table (docs/corpus.md)
    python -m study.corpus cost                                               # CPU hours per phase

Phases (the emergence issue's corpus; seeds 100 and up are the held-out test's and are refused here):

- ``hard``: every task's hard level on xs, seeds 0-2; seed 0 with every measure (gradient ranks, Hessian, LLC),
  the others with the default ones (RankMe, probes); each recorded until 8 evaluations after 0.9 has held.
- ``levels``: easy and medium on xs, seeds 0-1, likewise.
- ``controls``: the hard level with shuffled answers (nothing to learn) for the learnable tasks, seeds 0-1,
  to the end of the budget.
- ``s``: size ``s`` on the hard level of ``mod`` and two calibrated tasks, seeds 0-1.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tasks
from capgeo_callbacks.summary import json_safe, read_summary
from study.runner import ROOT, Job, run_jobs, summary_of

RUNS = ROOT / "runs" / "corpus"
CORPUS = ROOT / "corpus"
HELD_OUT_SEEDS = 100  # seeds from here on belong to the pre-registered held-out test
CONTROL_TASKS = ("copy", "reverse", "compare", "add", "sort", "mul")  # learnable tasks with a shuffled twin
SIZE_S_TASKS = ("mod", "sort", "copy")
LEARNED = ("--stop-when-learned",)


def _job(phase: str, task: str, difficulty: str, seed: int, size: str = "xs", measures: str = "default",
         extra: Sequence[str] = ()) -> Job:
    if seed >= HELD_OUT_SEEDS:
        raise ValueError(f"seed {seed} is a held-out seed (>= {HELD_OUT_SEEDS}): the corpus calibrates on seeds "
                         f"below it; held-out runs go through python -m study.heldout")
    suffix = "-shuffled" if "--shuffle-answers" in extra else ""
    name = f"{task}-{difficulty}-{size}-s{seed}{suffix}"
    argv = ("--task", task, "--difficulty", difficulty, "--size", size, "--seed", str(seed), "--measures",
            measures, *extra)
    return Job(name, argv, RUNS / phase, {"phase": phase, "task": task, "difficulty": difficulty, "seed": seed,
                                           "size": size})


def phase_jobs(phase: str) -> list[Job]:
    """The jobs of one phase, seed-major (every task's seed 0 first), so a partial phase covers every task."""
    if phase == "hard":
        return [_job(phase, task, "hard", seed, measures="all" if seed == 0 else "default", extra=LEARNED)
                for seed in (0, 1, 2) for task in tasks.TASKS]
    if phase == "levels":
        return [_job(phase, task, difficulty, seed, extra=LEARNED)
                for seed in (0, 1) for difficulty in ("easy", "medium") for task in tasks.TASKS]
    if phase == "controls":
        return [_job(phase, task, "hard", seed, extra=("--shuffle-answers",))
                for seed in (0, 1) for task in CONTROL_TASKS]
    if phase == "s":
        return [_job(phase, task, "hard", seed, size="s", extra=LEARNED) for seed in (0, 1) for task in SIZE_S_TASKS]
    raise ValueError(f"unknown phase {phase!r}; valid: {', '.join(PHASES)}")


PHASES = ("hard", "levels", "controls", "s")


def export(runs: Path = RUNS, corpus: Path = CORPUS) -> int:
    """Copy each finished run's summary, gzipped and compact, to ``corpus/<phase>/<run>.json.gz``."""
    count = 0
    for phase in PHASES:
        for job in phase_jobs(phase):
            summary = summary_of(Job(job.name, job.argv, runs / phase))
            if summary is None:
                continue
            write_packed(summary, corpus / phase / f"{job.name}.json.gz")
            count += 1
    return count


def write_packed(summary: dict[str, Any], path: Path) -> Path:
    """A summary as compact gzipped JSON (what the repository commits)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    summary = {key: value for key, value in summary.items() if key != "run_dir"}
    with gzip.open(path, "wt") as handle:
        json.dump(json_safe(summary), handle, separators=(",", ":"))
    return path


def corpus_summaries(corpus: Path = CORPUS, phases: Sequence[str] = PHASES) -> list[tuple[str, dict[str, Any]]]:
    """``(phase, summary)`` of every committed run."""
    return [(phase, read_summary(path)) for phase in phases for path in sorted((corpus / phase).glob("*.json.gz"))]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run (or resume) phases")
    run.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    run.add_argument("--workers", type=int, default=2)
    commands.add_parser("export", help="gzip finished summaries into corpus/")
    args = parser.parse_args(argv)
    if args.command == "run":
        for phase in args.phases:
            print(f"== phase {phase}", flush=True)
            run_jobs(phase_jobs(phase), workers=args.workers)
    elif args.command == "export":
        print(f"{export()} runs exported to {CORPUS}")


if __name__ == "__main__":
    main()
