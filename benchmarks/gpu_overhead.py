"""Overhead of the default callbacks on one GPU: ``--measures default`` vs ``none``, the main command's task at
model sizes ``s``, ``m`` and ``l``, as ratios in one run of at most ``--budget`` seconds.

    python -m benchmarks.gpu_overhead                                  # sort hard at s, m, l; 8 minutes at most
    python -m benchmarks.gpu_overhead --out results.json               # also every pair as JSON
    python -m benchmarks.gpu_overhead --accelerator cpu --sizes xs --fraction 0.005 --repeats 1 --budget 60  # smoke

For each size, the first ``fraction`` of the task's default run (``train.py --stop-at-step``: the whole run's
evaluation schedule, so the dense early evaluations are all in it) is run with ``--accelerator gpu --devices 1``,
after one short warm-up run (CUDA context, cuBLAS handles, the allocator, the kernels' first compilation), as
``repeats`` pairs of the two settings, the order alternating from pair to pair, and each pair's ratio (default /
none) is printed with the median. Wall time, not CPU time: the GPU's work is not the process's CPU time; each run
ends with ``torch.cuda.synchronize()``, so queued kernels count in the run that queued them. The run stops starting
pairs when the next one would pass ``--budget`` (the time of the size's last pair is the estimate), so the script
fits the device's lease; a size with fewer pairs than asked says so. The CPU counterpart, with the time inside each
callback, is ``benchmarks/overhead.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import train_cli
from benchmarks._timing import median
from benchmarks.overhead import machine, run
from capgeo_callbacks.run.schedule import evaluation_steps
from models import SIZES
from tasks import DIFFICULTIES, TASKS
from tasks.budgets import budget

WARMUP_STEPS = 5


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="sort", choices=TASKS)
    parser.add_argument("--difficulty", default="hard", choices=DIFFICULTIES)
    parser.add_argument("--sizes", nargs="+", default=["s", "m", "l"], choices=list(SIZES))
    parser.add_argument("--fraction", type=float, default=0.1,
                        help="share of the default run's budget to train (its evaluation schedule is kept)")
    parser.add_argument("--repeats", type=int, default=3, help="pairs per size (fewer if the budget runs out)")
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for the whole script, warm-ups included")
    parser.add_argument("--accelerator", default="gpu", choices=["gpu", "cpu"], help="cpu: a smoke test only")
    parser.add_argument("--measures", default="default", help="the measured setting (vs 'none')")
    parser.add_argument("--out", type=Path, default=None, help="write every pair as JSON here")
    args = parser.parse_args(argv)
    if not 0 < args.fraction <= 1:
        parser.error(f"--fraction must be in (0, 1], got {args.fraction}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    args.max_steps = budget(args.task, args.difficulty).max_steps
    args.steps = max(1, math.ceil(args.max_steps * args.fraction))
    args.evaluations = sum(1 for step in evaluation_steps(args.max_steps, train_cli.EVALUATION_POINTS)
                           if step <= args.steps)
    return args


def timed_run(argv: list[str], accelerator: str) -> float:
    """Wall seconds of one ``train.py`` run, its queued device work finished before the clock stops."""
    started = time.perf_counter()
    run([*argv, "--accelerator", accelerator, "--devices", "1"])
    if accelerator == "gpu":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    began = time.perf_counter()
    if args.accelerator == "gpu" and not torch.cuda.is_available():
        raise SystemExit("gpu_overhead.py needs a CUDA GPU, and torch.cuda.is_available() is False here "
                         f"(torch {torch.__version__}); --accelerator cpu runs it as a smoke test, and "
                         "benchmarks/overhead.py measures the overhead on a CPU")
    device = torch.cuda.get_device_name() if args.accelerator == "gpu" else machine()["cpu"]
    print(f"{args.task}/{args.difficulty} on {device}: {args.steps} of {args.max_steps} steps, {args.evaluations} "
          f"evaluations, up to {args.repeats} pairs per size, wall time, budget {args.budget:.0f} s", flush=True)
    results: dict[str, Any] = {"device": device, "task": args.task, "difficulty": args.difficulty,
                               "steps": args.steps, "max_steps": args.max_steps, "evaluations": args.evaluations,
                               "torch": str(torch.__version__), "sizes": {}}
    estimate = 0.0  # seconds of the next pair: the last pair's (the previous, smaller size's for a size's first)
    for size in args.sizes:
        base = ["--task", args.task, "--difficulty", args.difficulty, "--size", size]
        warmup = timed_run([*base, "--stop-at-step", str(min(WARMUP_STEPS, args.steps)), "--measures", args.measures],
                           args.accelerator)
        pairs: list[dict[str, Any]] = []
        for i in range(args.repeats):
            if time.perf_counter() - began + estimate > args.budget:
                break
            order = ("none", "measured") if i % 2 == 0 else ("measured", "none")
            times = {}
            for setting in order:
                measures = "none" if setting == "none" else args.measures
                times[setting] = timed_run([*base, "--stop-at-step", str(args.steps), "--measures", measures],
                                           args.accelerator)
            pairs.append({"first": order[0], **times, "ratio": times["measured"] / times["none"]})
            estimate = times["none"] + times["measured"]
        ratio = median([p["ratio"] for p in pairs]) if pairs else math.nan
        results["sizes"][size] = {"warmup_s": warmup, "pairs": pairs, "ratio": ratio}
        shown = ", ".join(f"{p['none']:.1f}/{p['measured']:.1f} s = {p['ratio']:.3f}" for p in pairs) or "no pair"
        short = f" (budget: {len(pairs)} of {args.repeats})" if len(pairs) < args.repeats else ""
        print(f"  size {size}: median ratio {ratio:.3f}{short}; none/default per pair: {shown}", flush=True)
    results["seconds"] = time.perf_counter() - began
    print(f"done in {results['seconds']:.0f} s")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
