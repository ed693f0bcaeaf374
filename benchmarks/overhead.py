"""Overhead of the default callbacks on train.py's default run: ``--measures default`` vs ``none``.

    python benchmarks/overhead.py --task sort --difficulty hard --fraction 0.05 --repeats 3

Runs the first ``fraction`` of the default run (same evaluation interval as the full run: the step
budget and the number of evaluation points are both scaled), alternating the two settings
``repeats`` times, and prints the median wall time of each and their ratio (target <= 1.05).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import train  # noqa: E402


def timed_run(argv: list[str]) -> float:
    with tempfile.TemporaryDirectory() as logdir:
        started = time.perf_counter()
        train.main([*argv, "--logdir", logdir, "--no-progress"])
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="sort")
    parser.add_argument("--difficulty", default="hard")
    parser.add_argument("--fraction", type=float, default=0.05)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--measures", default="default", help="the measured setting (vs 'none')")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    budget = train.DEFAULTS[args.task][args.difficulty].max_steps
    steps = max(1, math.ceil(budget * args.fraction))
    points = max(1, math.ceil(train.EVALUATION_POINTS * args.fraction))
    base = ["--task", args.task, "--difficulty", args.difficulty, "--max-steps", str(steps),
            "--eval-points", str(points)]
    timed_run([*base, "--max-steps", "5", "--measures", "none"])  # warm-up (imports, allocator)
    times: dict[str, list[float]] = {"none": [], args.measures: []}
    for _ in range(args.repeats):
        for setting in times:
            times[setting].append(timed_run([*base, "--measures", setting]))
    none, measured = statistics.median(times["none"]), statistics.median(times[args.measures])
    print(f"{args.task}/{args.difficulty}: {steps} steps, {points} evaluations, {args.repeats} repeats")
    for setting, values in times.items():
        print(f"  --measures {setting:<8} median {statistics.median(values):7.2f} s  "
              f"({', '.join(f'{v:.2f}' for v in values)})")
    print(f"overhead ratio ({args.measures} / none): {measured / none:.3f}")


if __name__ == "__main__":
    main()
