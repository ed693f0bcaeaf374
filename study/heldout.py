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

from study.corpus import CORPUS, write_packed
from study.forecast import REGISTRATION
from study.runner import ROOT, Job, run_jobs, summary_of

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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run")
    run.add_argument("--workers", type=int, default=2)
    run.add_argument("--nice", type=int, default=0)
    commands.add_parser("export")
    args = parser.parse_args(argv)
    if args.command == "run":
        os.nice(args.nice)
        jobs = heldout_jobs()
        done = [job for job in jobs if (CORPUS / "heldout" / f"{job.name}.json.gz").exists()]
        run_jobs([job for job in jobs if job not in done], workers=args.workers,
                 on_finished=lambda states: export())
    print(f"{export()} held-out runs exported to {CORPUS / 'heldout'}")


if __name__ == "__main__":
    main()
