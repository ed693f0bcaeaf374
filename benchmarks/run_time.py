"""Projected wall time of train.py's default runs, from two short runs at the full run's evaluation cadence.

    python -m benchmarks.run_time --difficulty hard --tasks reverse compare add deduce sort parity --threads 1

For each task, times ``train.py`` for 24 and 144 steps (evaluating as often, per step, as the default run
does) and projects ``(t144 - t24) / 120 * budget``: start-up cancels out of the difference.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time

import torch

import tasks
import train
import train_cli
from tasks.budgets import budget

SHORT, LONG = 24, 144


def timed_run(task: str, difficulty: str, steps: int, steps_budget: int) -> float:
    points = max(1, math.ceil(train_cli.EVALUATION_POINTS * steps / steps_budget))
    with tempfile.TemporaryDirectory() as logdir:
        started = time.perf_counter()
        train.main(["--task", task, "--difficulty", difficulty, "--max-steps", str(steps), "--eval-points",
                    str(points), "--logdir", logdir, "--no-progress"])
        return time.perf_counter() - started


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(tasks.TASKS), choices=tasks.TASKS)
    parser.add_argument("--difficulty", default="hard", choices=tasks.DIFFICULTIES)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    projected: dict[str, float] = {}
    for task in args.tasks:
        steps_budget = budget(task, args.difficulty).max_steps
        long_run = timed_run(task, args.difficulty, LONG, steps_budget)
        per_step = long_run - timed_run(task, args.difficulty, SHORT, steps_budget)
        per_step /= LONG - SHORT
        projected[task] = per_step * steps_budget
        print(f"{task}/{args.difficulty}: {per_step:.3f} s a step, budget {steps_budget} steps: projected "
              f"{projected[task] / 60:.1f} min ({args.threads} thread(s))", flush=True)
    return projected


if __name__ == "__main__":
    main()
