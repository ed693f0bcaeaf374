"""Overhead of the default callbacks on one GPU, at model sizes ``m`` and ``l``: ``--measures default`` vs ``none``.

    python -m benchmarks.gpu_overhead --task sort --difficulty hard --sizes m l --fraction 0.1 --repeats 3

For each size, runs the first ``fraction`` of the task's default run (``train.py --stop-at-step``: the full
run's evaluation schedule, so the early, dense evaluations are included) with ``--accelerator gpu --devices 1``,
the two settings interleaved ``repeats`` times after a short warm-up run (CUDA context, cuBLAS handles, the
allocator), and prints the median wall time of each and their ratio. Wall time, not CPU time: the GPU's work
is not the process's CPU time; each run ends with ``torch.cuda.synchronize()``, so queued kernels are counted
in the run that queued them. The CPU counterpart, with the time inside the callbacks themselves, is
``benchmarks/overhead.py``. Needs CUDA: without it, the script says so and exits.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

import torch

import train
from benchmarks._timing import add_timing_args, interleaved, median
from benchmarks.overhead import run
from capgeo_callbacks.run.schedule import evaluation_steps
from models import SIZES
from tasks import DIFFICULTIES, TASKS
from tasks.budgets import budget

GPU = ["--accelerator", "gpu", "--devices", "1"]
WARMUP_STEPS = 5


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="sort", choices=TASKS)
    parser.add_argument("--difficulty", default="hard", choices=DIFFICULTIES)
    parser.add_argument("--sizes", nargs="+", default=["m", "l"], choices=list(SIZES))
    parser.add_argument("--fraction", type=float, default=0.1,
                        help="share of the default run's budget to train (its evaluation schedule is kept)")
    parser.add_argument("--measures", default="default", help="the measured setting (vs 'none')")
    add_timing_args(parser)
    args = parser.parse_args(argv)
    if not 0 < args.fraction <= 1:
        parser.error(f"--fraction must be in (0, 1], got {args.fraction}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.clock not in (None, "wall"):
        parser.error("--clock must be wall on a GPU: CPU time does not count the GPU's work")
    args.clock = "wall"
    args.max_steps = budget(args.task, args.difficulty).max_steps
    args.steps = max(1, math.ceil(args.max_steps * args.fraction))
    args.evaluations = sum(1 for step in evaluation_steps(args.max_steps, train.EVALUATION_POINTS)
                           if step <= args.steps)
    return args


def gpu_run(argv: list[str]) -> None:
    """One ``train.py`` run on the GPU, its queued work finished before the clock stops."""
    run([*argv, *GPU])
    torch.cuda.synchronize()


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("gpu_overhead.py needs a CUDA GPU, and torch.cuda.is_available() is False here "
                         f"(torch {torch.__version__}); on a CPU, benchmarks/overhead.py measures the overhead")
    torch.set_num_threads(args.threads)
    print(f"{args.task}/{args.difficulty} on {torch.cuda.get_device_name()}: {args.steps} of {args.max_steps} steps, "
          f"{args.evaluations} evaluations, {args.repeats} repeats, wall time")
    results: dict[str, Any] = {}
    for size in args.sizes:
        base = ["--task", args.task, "--difficulty", args.difficulty, "--size", size, "--stop-at-step", str(args.steps)]
        gpu_run([*base[:-1], str(min(WARMUP_STEPS, args.steps)), "--measures", "none"])  # warm-up
        times = interleaved({"none": lambda base=base: gpu_run([*base, "--measures", "none"]),
                             args.measures: lambda base=base: gpu_run([*base, "--measures", args.measures])},
                            args.repeats, warmup=0, clock=args.clock)
        none, measured = median(times["none"]), median(times[args.measures])
        print(f"  size {size}:")
        for setting, values in times.items():
            every = ", ".join(f"{v:.2f}" for v in values)
            print(f"    --measures {setting:<8} median {median(values):8.2f} s  ({every})")
        print(f"    overhead ratio ({args.measures} / none): {measured / none:.3f}, "
              f"{(measured - none) / max(args.evaluations, 1) * 1e3:.0f} ms per evaluation")
        results[size] = {"times": times, "ratio": measured / none}
    return {"steps": args.steps, "evaluations": args.evaluations, "sizes": results}


if __name__ == "__main__":
    main()
