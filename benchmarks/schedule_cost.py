"""What the evaluation schedule adds to a run, apart from capgeo's measuring: its validation passes, and their time.

    python -m benchmarks.schedule_cost passes            # the passes of every default level: counted, not timed
    python -m benchmarks.schedule_cost time --task sort --difficulty hard --out benchmarks/results/schedule-sort.json
    python -m benchmarks.schedule_cost time --task mod --difficulty hard --max-steps 40 --min-pairs 1 --max-pairs 1

``passes``: the default levels' validation passes under ``EvaluationSchedule(points=256)``
(:func:`~capgeo_callbacks.run.schedule.validation_passes`), in words; Lightning's default validates once at the end
of each epoch, and ``train.py``'s training stream is endless, so there every pass is the schedule's.

``time``: pairs of the level's run with ``--eval-points 256`` (the default) and with ``--eval-points 1`` (steps 0, 1
and the end: 3 passes), both ``--measures none --overhead-budget measure``, interleaved, on one thread, from
``--min-pairs`` until the 95% interval of the mean ratio is at most ``--width`` either side (or ``--max-pairs``).
The ratio is of the runs' own CPU time as their budgets counted it (capgeo's own work, the detector's rules, left
out: that is the measuring cost, ``benchmarks/overhead_budget.py``), so it is the schedule's alone; the time per pass
is the difference over the passes added. Nothing is asserted: run it on a quiet machine, never beside other work.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._timing import apply_timing_args
from benchmarks.overhead import provenance
from benchmarks.overhead_budget import interval, run, run_order
from capgeo_callbacks.run.schedule import validation_passes
from tasks import DIFFICULTIES, TASKS
from tasks.budgets import budget
from train_cli import EVALUATION_POINTS

FEW_POINTS = 1  # the run it is compared with: 3 passes, at steps 0, 1 and the end


def passes_text() -> str:
    """What the schedule adds on the default levels, in words: counted from the schedule, not timed."""
    steps = {(task, level): budget(task, level).max_steps for task in TASKS for level in DIFFICULTIES}
    passes = {level: validation_passes(n, EVALUATION_POINTS)[0] for level, n in steps.items()}
    spacing = sorted(steps[level] / passes[level] for level in steps)
    few, many = min(passes.values()), max(passes.values())
    return (f"On each of the {len(steps)} default levels of `train.py` ({min(steps.values()):,} to "
            f"{max(steps.values()):,} steps), `EvaluationSchedule(points={EVALUATION_POINTS})` makes "
            + (f"{few}" if few == many else f"{few} to {many}")
            + f" validation passes (one every {spacing[0]:.1f} to {spacing[-1]:.1f} steps on average, denser in the "
            "first tenth). Lightning's default validates at the end of each epoch, and `train.py`'s training stream "
            "has no end, so there every one of them is added; a run of E epochs that would validate once an epoch "
            f"gets {EVALUATION_POINTS} - E more (`validation_passes(max_steps, points, steps_per_epoch=...)`).")


def timed(args: argparse.Namespace) -> dict[str, Any]:
    """The paired runs of ``time`` (module docstring)."""
    apply_timing_args(args)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    base = ["--task", args.task, "--difficulty", args.difficulty, "--measures", "none", "--overhead-budget", "measure",
            *(["--max-steps", str(args.max_steps)] if args.max_steps else [])]
    argvs = {"schedule": [*base, "--eval-points", str(EVALUATION_POINTS)],
             "few": [*base, "--eval-points", str(FEW_POINTS)]}
    own: dict[str, list[float]] = {name: [] for name in argvs}
    load = os.getloadavg()
    for pair in range(args.max_pairs):
        for name in run_order(list(argvs), pair):
            own[name].append(run(argvs[name])["overhead"]["run_cpu_seconds"])
        ratios = [s / f for s, f in zip(own["schedule"], own["few"], strict=True)]
        mean, half = interval(ratios)
        if pair + 1 >= args.min_pairs and half <= args.width:
            break
    steps = args.max_steps or budget(args.task, args.difficulty).max_steps
    added = validation_passes(steps, EVALUATION_POINTS)[0] - validation_passes(steps, FEW_POINTS)[0]
    per_pass = (statistics.median(own["schedule"]) - statistics.median(own["few"])) / added
    print(f"{args.task}/{args.difficulty}, {steps} steps: {added} passes added by the schedule; the run's own CPU time "
          f"(capgeo's left out) {mean:.3f} [{mean - half:.3f}, {mean + half:.3f}] times that of 3 passes over "
          f"{len(ratios)} interleaved pair(s), {1000 * per_pass:.1f} ms a pass; 1-minute load {load[0]:.1f} to "
          f"{os.getloadavg()[0]:.1f}")
    result = {"task": args.task, "difficulty": args.difficulty, "steps": steps, "passes_added": added, "own": own,
              "ratios": ratios, "mean": mean, "half_width": half, "seconds_per_pass": per_pass,
              "load_average": [load[0], os.getloadavg()[0]], "provenance": provenance("cpu", args.threads, {})}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, default=str))
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["passes", "time"])
    parser.add_argument("--task", default="sort", choices=TASKS)
    parser.add_argument("--difficulty", default="hard", choices=DIFFICULTIES)
    parser.add_argument("--max-steps", type=int, default=0, help="the run's budget (0: the level's)")
    parser.add_argument("--min-pairs", type=int, default=5)
    parser.add_argument("--max-pairs", type=int, default=30)
    parser.add_argument("--width", type=float, default=0.02, help="the 95%% interval's half-width to stop at")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    args = parser.parse_args(argv)
    if args.command == "passes":
        print(passes_text())
        return None
    args.repeats, args.clock = 1, "cpu"
    return timed(args)


if __name__ == "__main__":
    main()
