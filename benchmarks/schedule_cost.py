"""What the evaluation schedule adds to a run, apart from capgeo's measuring: its validation passes, and their time.

    python -m benchmarks.schedule_cost passes            # the passes of every default level: counted, not timed
    python -m benchmarks.schedule_cost time --task sort --difficulty hard --out benchmarks/results/schedule-sort.json
    python -m benchmarks.schedule_cost time --task mod --difficulty hard --max-steps 40 --min-pairs 1 --max-pairs 1
    python -m benchmarks.schedule_cost report benchmarks/results/schedule-sort.json   # a result, in words

``passes``: the default levels' validation passes under ``EvaluationSchedule(points=256)``
(:func:`~capgeo_callbacks.run.schedule.validation_passes`), in words; Lightning's default validates once at the end
of each epoch, and ``train.py``'s training stream is endless, so there every pass is the schedule's.

``time``: pairs of the level's run with ``--eval-points 256`` (the default) and with ``--eval-points 1`` (steps 0, 1
and the end: 3 passes), both ``--measures none --overhead-budget measure``, interleaved, on one thread, from
``--min-pairs`` until the 95% interval of the mean ratio is at most ``--width`` either side (or ``--max-pairs``).
The ratio is of the runs' own CPU time as their budgets counted it (capgeo's own work, the detector's rules, left
out: that is the measuring cost, ``benchmarks/overhead_budget.py``), so it is the schedule's alone; the time per pass
is the difference over the passes added. With ``--out X.json`` each run's summary is kept, packed, in ``X/schedule/``
and ``X/few/``, the result is written after every pair, and the same command, run again, goes on from the whole
pairs kept there (:mod:`benchmarks._pairs`). Nothing is asserted: run it on a quiet machine, never beside other work.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._pairs import Runs, calls_of, calls_text, interval, kept_pairs, more_pairs, with_call
from benchmarks._timing import apply_timing_args
from benchmarks.overhead import provenance
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


def report(result: dict[str, Any]) -> str:
    """A result of ``time`` (what ``--out`` writes) in words."""
    mean, half = result["mean"], result["half_width"]
    loads = result.get("loads") or result.get("load_average") or []
    return (f"{result['task']}/{result['difficulty']}, {result['steps']:,} steps: the schedule's "
            f"{result['passes_added']} validation passes beyond the 3 of a run with `--eval-points {FEW_POINTS}` "
            f"(steps 0, 1 and the end) make the run's own CPU time (capgeo's left out) {mean:.3f} "
            f"[{mean - half:.3f}, {mean + half:.3f}] times as long (mean ratio and its 95% interval over "
            f"{len(result['ratios'])} interleaved pair(s), one thread: "
            + ", ".join(f"{r:.3f}" for r in result["ratios"])
            + f"), {1000 * result['seconds_per_pass']:.1f} ms a pass (the difference of the medians over the passes "
            "added); 1-minute load " + (", ".join(f"{x:.1f}" for x in loads) if loads else "not recorded")
            + (" after each pair" if result.get("loads") else "")
            + (f"; {calls_text(result['calls'])}" if result.get("calls") else "") + ".")


def timed(args: argparse.Namespace) -> dict[str, Any]:
    """The paired runs of ``time`` (module docstring)."""
    apply_timing_args(args)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    base = ["--task", args.task, "--difficulty", args.difficulty, "--measures", "none", "--overhead-budget", "measure",
            *(["--max-steps", str(args.max_steps)] if args.max_steps else [])]
    points = {"schedule": EVALUATION_POINTS, "few": FEW_POINTS}
    argvs = {name: [*base, "--eval-points", str(n)] for name, n in points.items()}
    expected = {name: {"task": args.task, "difficulty": args.difficulty, "eval_points": n, "measure_names": [],
                       **({"max_steps": args.max_steps} if args.max_steps else {})} for name, n in points.items()}
    kept = None if args.out is None else args.out.with_suffix("")
    runs: Runs = {name: [] for name in argvs} if kept is None else kept_pairs(kept, expected)
    if runs["few"]:
        print(f"going on after the {len(runs['few'])} pair(s) kept in {kept}")
    earlier = json.loads(args.out.read_text()) if runs["few"] and args.out.is_file() else {}
    loads: list[float] = list(earlier.get("loads", []))[:len(runs["few"])]  # 1-minute load after each pair
    steps = args.max_steps or budget(args.task, args.difficulty).max_steps
    added = validation_passes(steps, EVALUATION_POINTS)[0] - validation_passes(steps, FEW_POINTS)[0]
    made_with = provenance("cpu", args.threads, {})  # this call's code and machine, read once
    n_kept, calls = len(runs["few"]), calls_of(earlier, len(runs["few"]))

    def tally(runs: Runs) -> dict[str, Any]:
        own = {name: [s["overhead"]["run_cpu_seconds"] for s in found] for name, found in runs.items()}
        ratios = [s / f for s, f in zip(own["schedule"], own["few"], strict=True)]
        mean, half = interval(ratios)
        per_pass = (statistics.median(own["schedule"]) - statistics.median(own["few"])) / added
        made = with_call(calls, n_kept, len(ratios), made_with)  # the last that made pairs gives "provenance"
        return {"task": args.task, "difficulty": args.difficulty, "steps": steps, "passes_added": added, "own": own,
                "ratios": ratios, "mean": mean, "half_width": half, "seconds_per_pass": per_pass, "loads": loads,
                "width": args.width, "calls": made, "provenance": made[-1]["provenance"] if made else made_with}

    def enough(runs: Runs) -> bool:
        return len(runs["few"]) >= args.min_pairs and tally(runs)["half_width"] <= args.width

    def after_pair(runs: Runs) -> None:
        loads.append(os.getloadavg()[0])
        if args.out is not None:  # after every pair: a session that ends mid-way keeps the pairs it made
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(tally(runs), indent=1, default=str))

    more_pairs(runs, argvs, kept, max_pairs=args.max_pairs, enough=enough, after_pair=after_pair)
    if not runs["few"]:
        raise SystemExit("no pair made: --max-pairs must be at least 1")
    result = tally(runs)
    print(report(result))
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["passes", "time", "report"])
    parser.add_argument("result", nargs="?", type=Path, help="report: the result to print (what time's --out wrote)")
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
    if args.command == "report":
        if args.result is None:
            parser.error("report needs the result to print: python -m benchmarks.schedule_cost report X.json")
        result = json.loads(args.result.read_text())
        print(report(result))
        return result
    args.repeats, args.clock = 1, "cpu"
    return timed(args)


if __name__ == "__main__":
    main()
