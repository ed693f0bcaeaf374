"""Measure steps to acquisition for each task x difficulty with the smallest model (README table).

    python benchmarks/acquisition_table.py --difficulties easy medium --out acquisition.md
    python benchmarks/acquisition_table.py --difficulties hard --fraction 0.1   # hard: first tenth only

Each run is ``train.py`` with its defaults (``--stop-after-acquisition`` ends it once acquisition is
confirmed, so the wall time is the time to acquisition). ``--fraction`` runs only that fraction of
the default budget (to check that hard tasks are not acquired early), on the whole budget's learning-rate
schedule and evaluation cadence (``train.py --stop-at-step``): the first steps of the default run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tasks  # noqa: E402
import train  # noqa: E402
from tasks.budgets import budget  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(tasks.TASKS), choices=tasks.TASKS)
    parser.add_argument("--difficulties", nargs="+", default=list(tasks.DIFFICULTIES), choices=tasks.DIFFICULTIES)
    parser.add_argument("--size", default="xs")
    parser.add_argument("--fraction", type=float, default=1.0, help="fraction of the default budget to run")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--measures", default="rankme")
    parser.add_argument("--no-stop", action="store_true", help="run the whole budget even after acquisition")
    parser.add_argument("--out", default=None, help="append JSON lines of results here")
    parser.add_argument("--logdir", default=None, help="keep the run folders here (default: discarded)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for difficulty in args.difficulties:
        for task in args.tasks:
            steps_budget = budget(task, difficulty).max_steps
            steps = max(1, math.ceil(steps_budget * args.fraction))
            with tempfile.TemporaryDirectory() as scratch:
                logdir = args.logdir or scratch
                argv = ["--task", task, "--difficulty", difficulty, "--size", args.size, "--stop-at-step", str(steps),
                        "--logdir", logdir, "--no-progress", "--measures", args.measures]
                if not args.no_stop:
                    argv.append("--stop-after-acquisition")
                started = time.perf_counter()
                summary = train.main(argv)
                wall = time.perf_counter() - started
            row = {"task": task, "difficulty": difficulty, "size": args.size, "budget": steps_budget, "ran": steps,
                   "steps_run": summary.get("steps"), "acquisition_step": summary.get("acquisition_step"),
                   "final_acc": (summary.get("series", {}).get("acc") or [[None, None]])[-1][1],
                   "verdict": summary.get("verdict"), "gap": summary.get("gap"), "wall_s": round(wall, 1),
                   "threads": args.threads}
            rows.append(row)
            print("RESULT", json.dumps(row), flush=True)
            if args.out:
                with open(args.out, "a") as handle:
                    handle.write(json.dumps(row) + "\n")
    print("\n| task | difficulty | budget (steps) | run | acquisition step | wall (s) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        acq = r["acquisition_step"] if r["acquisition_step"] is not None else "not acquired"
        print(f"| {r['task']} | {r['difficulty']} | {r['budget']} | {r['ran']} | {acq} | {r['wall_s']} |")


if __name__ == "__main__":
    main()
