"""Sweep train.py over tasks x difficulties x sizes (x seeds), skipping finished runs and resuming others.

    python sweep.py --tasks mod sort --difficulties hard --sizes xs s --logdir runs/sweep --fraction 0.25 --jobs 2
    python -m study.report runs/sweep

Each run is one ``train.py`` subprocess writing to ``LOGDIR/TASK-DIFFICULTY-SIZE-sSEED`` (train.py's own
naming), with its output in ``sweep.log`` beside the run's ``version_*`` folders. Before starting a run the
sweep reads what the folder holds:

- finished (skipped): the newest ``version_*`` with a ``capgeo_summary.json`` whose ``steps`` reached the
  run's stop step (its ``max_steps``, or the ``--fraction`` of it), or, with ``--stop-when-learned``,
  whose accuracy held 0.9 (``labels.full_step`` is set: train.py stopped it 8 evaluations later);
- resumable: otherwise, when the newest ``version_*`` (the one ``train.py --resume`` picks) has
  ``checkpoints/last.ckpt``: rerun with ``--resume``, which continues in that folder (also how a finished
  run is extended when ``--fraction`` grows);
- fresh: anything else (no folder, or a folder killed before its first checkpoint): a new ``version_*``.

``--fraction F`` runs the first F of each run's budget: train.py's ``--stop-at-step``, with the
learning-rate schedule and evaluation cadence of the whole budget, so the stopped run is exactly the start
of the full one and the report's progress axis (step / max_steps) stays comparable across sizes.

Threads: each run gets ``OMP_NUM_THREADS`` = cores // jobs (``--threads`` overrides), so ``--jobs 2`` on a
2-core machine runs two single-threaded runs side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import tasks
import train
from capgeo_callbacks.run.reading import newest_summary, read_version_summary, versions
from models import SIZES

ROOT = Path(__file__).resolve().parent

LOG_NAME = "sweep.log"
# train.py flags the sweep sets itself for every run; in --extra-args they would break naming or resuming.
RESERVED_FLAGS = ("--task", "--difficulty", "--size", "--seed", "--logdir", "--name", "--resume", "--stop-at-step")

State = Literal["finished", "resume", "fresh"]


@dataclass(frozen=True)
class RunPlan:
    """One run of the sweep and what to do with it.

    Attributes:
        task: task name.
        difficulty: difficulty name.
        size: model size name.
        seed: training seed.
        name: the run folder's name under the log folder (train.py's naming).
        max_steps: the run's step budget (the schedule's length).
        stop_at_step: the step the run ends at (``max_steps`` unless ``--fraction`` is given).
        argv: the train.py arguments (without ``--resume``).
        state: "finished" (skip), "resume" (rerun with ``--resume``) or "fresh".
        reason: why, in a few words (shown by ``--dry-run``).
    """

    task: str
    difficulty: str
    size: str
    seed: int
    name: str
    max_steps: int
    stop_at_step: int
    argv: tuple[str, ...]
    state: State
    reason: str


def run_state(run_root: Path, stop_at_step: int, stop_when_learned: bool = False) -> tuple[State, str]:
    """Whether a run folder holds a finished run, a resumable one, or nothing usable.

    Finished: the newest version that has a summary reached ``stop_at_step`` steps (or, with
    ``stop_when_learned``, held 0.9). Resumable: the newest version has
    ``checkpoints/last.ckpt`` (train.py's ``--resume`` only looks there). Otherwise fresh.

    Args:
        run_root: ``LOGDIR/RUN_NAME``.
        stop_at_step: the step the run must reach.
        stop_when_learned: whether the run stops once learned (then holding 0.9 is enough).

    Returns:
        The state and a short reason.
    """
    found = versions(run_root)
    for version in found:
        summary = read_version_summary(version)
        if summary is None:
            continue
        steps = summary.get("steps")
        if isinstance(steps, int) and steps >= stop_at_step:
            return "finished", f"{version.name}: {steps} steps"
        full_step = (summary.get("labels") or {}).get("full_step")
        if stop_when_learned and full_step is not None:
            return "finished", f"{version.name}: held 0.9 from step {full_step}"
        break
    if found and (found[0] / "checkpoints" / "last.ckpt").is_file():
        return "resume", f"{found[0].name}/checkpoints/last.ckpt"
    return "fresh", "no checkpoint" if found else "new run"


def _flag_present(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def plan_runs(
    tasks_: Sequence[str],
    difficulties: Sequence[str],
    sizes: Sequence[str],
    seeds: Sequence[int],
    logdir: str | Path,
    fraction: float | None = None,
    extra_args: Sequence[str] = (),
) -> list[RunPlan]:
    """Every run of the sweep, in task, difficulty, size, seed order, with its state on disk.

    Each run's arguments are checked by ``train.parse_args`` here, so a bad extra argument fails before
    any run starts.

    Args:
        tasks_: task names.
        difficulties: difficulty names.
        sizes: model size names.
        seeds: seeds.
        logdir: the sweep's log folder.
        fraction: the share of each run's step budget to run (train.py's ``--stop-at-step``; the budget,
            and so the schedule, stays train.py's default or ``--max-steps`` from ``extra_args``); None runs
            the whole budget.
        extra_args: more train.py arguments, the same for every run.

    Raises:
        ValueError: on an unknown name, a reserved flag in ``extra_args``, a fraction outside (0, 1], or
            arguments train.py rejects (with train.py's message).
    """
    _check_choices("task", tasks_, tasks.TASKS)
    _check_choices("difficulty", difficulties, tasks.DIFFICULTIES)
    _check_choices("size", sizes, list(SIZES))
    reserved = [flag for flag in RESERVED_FLAGS if _flag_present(extra_args, flag)]
    if reserved:
        raise ValueError(f"--extra-args must not set {', '.join(reserved)}: the sweep sets them per run "
                         f"(use --tasks, --difficulties, --sizes, --seeds, --logdir)")
    if fraction is not None and not 0 < fraction <= 1:
        raise ValueError(f"--fraction must be in (0, 1] (the share of each run's step budget to run), got {fraction}")
    plans: list[RunPlan] = []
    for task in tasks_:
        for difficulty in difficulties:
            for size in sizes:
                for seed in seeds:
                    argv: tuple[str, ...] = ("--task", task, "--difficulty", difficulty, "--size", size,
                                             "--seed", str(seed), "--logdir", str(logdir), *extra_args)
                    args = _train_args(argv)
                    expected = (task, difficulty, size, seed, str(logdir), f"{task}-{difficulty}-{size}-s{seed}",
                                False, args.max_steps)
                    if (args.task, args.difficulty, args.size, args.seed, args.logdir, args.name,
                            args.resume, args.stop_at_step) != expected:
                        # an abbreviated flag (argparse accepts --se for --seed) slipped past the check above
                        raise ValueError(f"--extra-args {' '.join(extra_args)} override a flag the sweep sets "
                                         f"({', '.join(RESERVED_FLAGS)})")
                    stop = args.max_steps
                    if fraction is not None:  # in (0, 1], so 1 <= stop <= max_steps, as train.py requires
                        stop = max(1, round(fraction * args.max_steps))
                        argv = (*argv, "--stop-at-step", str(stop))
                    state, reason = run_state(Path(logdir) / args.name, stop, args.stop_when_learned)
                    plans.append(RunPlan(task, difficulty, size, seed, args.name, args.max_steps, stop, argv, state,
                                         reason))
    return plans


def _train_args(argv: Sequence[str]) -> argparse.Namespace:
    """``train.parse_args(argv)``, with its argparse error turned into a ValueError carrying the message."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):  # train.py's usage line would name sweep.py: keep the message only
            return train.parse_args(argv)
    except SystemExit as err:
        message = captured.getvalue().strip().splitlines()[-1:] or ["invalid arguments"]
        raise ValueError(f"train.py rejected {' '.join(argv)}: {message[0].split('error: ', 1)[-1]}") from err


def _check_choices(kind: str, given: Sequence[str], valid: Sequence[str]) -> None:
    unknown = [name for name in given if name not in valid]
    if unknown:
        raise ValueError(f"unknown {kind}(s) {', '.join(map(repr, unknown))}; valid: {', '.join(valid)}")


def execute(plan: RunPlan, logdir: Path, threads: int, show_output: bool = False) -> dict[str, Any]:
    """Run (or resume) one planned run of train.py as a subprocess.

    The child's output goes to ``LOGDIR/RUN/sweep.log`` (appended), or to this terminal with
    ``show_output``.

    Returns:
        ``{"name", "action", "returncode", "seconds", "log", "summary"}``; ``summary`` is the run's
        summary dict when it wrote one.
    """
    run_root = logdir / plan.name
    run_root.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(ROOT / "train.py"), *plan.argv, "--no-progress"]
    if plan.state == "resume":
        argv.append("--resume")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    log_path = run_root / LOG_NAME
    started = time.perf_counter()
    with open(log_path, "a") as log:
        log.write(f"\n$ OMP_NUM_THREADS={threads} {' '.join(argv)}\n")
        log.flush()
        out = None if show_output else log
        returncode = subprocess.run(argv, cwd=ROOT, env=env, stdout=out, stderr=out, check=False).returncode
    seconds = time.perf_counter() - started
    summary = newest_summary(run_root)
    action = "resumed" if plan.state == "resume" else "done"
    return {"name": plan.name, "action": action, "returncode": returncode, "seconds": seconds,
            "log": str(log_path), "summary": summary}


def _result_line(index: int, total: int, result: dict[str, Any]) -> str:
    width = len(str(total))
    head = f"[{index:>{width}}/{total}] {result['name']:<28}"
    if result["returncode"] != 0:
        return f"{head} FAILED (exit {result['returncode']}) after {result['seconds']:.0f} s; see {result['log']}"
    summary = result["summary"] or {}
    detail = (f"steps {summary.get('steps')}, acquisition {summary.get('acquisition_step')}, "
              f"verdict {summary.get('verdict')}, gap {summary.get('gap')}")
    return f"{head} {result['action']:<8} {result['seconds']:7.1f} s  {detail}"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The sweep's command line; ``--extra-args`` takes everything after it, for train.py."""
    parser = argparse.ArgumentParser(
        description="Run train.py over tasks x difficulties x sizes x seeds; skip finished runs, resume others.",
        epilog="Then: python -m study.report LOGDIR",
    )
    parser.add_argument("--tasks", nargs="+", required=True, metavar="TASK", help=f"of: {', '.join(tasks.TASKS)}")
    parser.add_argument("--difficulties", nargs="+", default=["hard"], metavar="DIFFICULTY",
                        help=f"of: {', '.join(tasks.DIFFICULTIES)} (default: hard)")
    parser.add_argument("--sizes", nargs="+", default=[next(iter(SIZES))], metavar="SIZE",
                        help=f"of: {', '.join(SIZES)} (default: {next(iter(SIZES))})")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], metavar="SEED", help="seeds (default: 0)")
    parser.add_argument("--logdir", default="runs/sweep", help="log folder of the sweep (default: runs/sweep)")
    parser.add_argument("--fraction", type=float, default=None,
                        help="run this share of each run's step budget, on the whole budget's schedule "
                             "(train.py --stop-at-step); a larger share later resumes the same runs")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (default: 1)")
    parser.add_argument("--threads", type=int, default=None,
                        help="OMP_NUM_THREADS per run (default: CPU cores // jobs, at least 1)")
    parser.add_argument("--stop-when-learned", action="store_true",
                        help="end each run 8 evaluations after val/acc has held 0.9 (passed to train.py; such a run "
                             "counts as finished)")
    parser.add_argument("--dry-run", action="store_true", help="list the runs and what would be done, run nothing")
    parser.add_argument("--show-output", action="store_true",
                        help="show train.py's output here instead of in RUN/sweep.log (only with --jobs 1)")
    parser.add_argument("--extra-args", nargs=argparse.REMAINDER, default=[],
                        help="everything after it goes to train.py (e.g. --extra-args --measures all --eval-points 64)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    if args.show_output and args.jobs > 1:
        parser.error("--show-output needs --jobs 1 (the outputs of parallel runs would interleave)")
    if args.stop_when_learned and "--stop-when-learned" not in args.extra_args:
        args.extra_args = [*args.extra_args, "--stop-when-learned"]
    try:
        args.plans = plan_runs(args.tasks, args.difficulties, args.sizes, args.seeds, args.logdir,
                               fraction=args.fraction, extra_args=args.extra_args)
    except ValueError as err:
        parser.error(str(err))
    return args


def threads_per_run(jobs: int, threads: int | None = None, cores: int | None = None) -> int:
    """``OMP_NUM_THREADS`` for each run: ``threads`` if given, else cores // jobs (at least 1), so parallel
    runs share the cores instead of each starting a thread per core."""
    if threads is not None:
        return threads
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))  # the cores this process may use (containers, taskset)
        except AttributeError:  # not on Linux
            cores = os.cpu_count() or 1
    return max(1, cores // jobs)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Run the sweep; returns one result dict per run (skipped runs have ``action`` "skipped")."""
    args = parse_args(argv)
    plans: list[RunPlan] = args.plans
    threads = threads_per_run(args.jobs, args.threads)
    logdir = Path(args.logdir)
    total = len(plans)
    if args.dry_run:
        for i, plan in enumerate(plans, 1):
            action = {"finished": "skip", "resume": "resume", "fresh": "run"}[plan.state]
            print(f"[{i}/{total}] {plan.name:<28} {action:<7} ({plan.reason}); "
                  f"steps {plan.stop_at_step} of {plan.max_steps}; "
                  f"train.py {' '.join(plan.argv)}{' --resume' if plan.state == 'resume' else ''}")
        return []
    logdir.mkdir(parents=True, exist_ok=True)
    print(f"sweep: {total} runs in {logdir}, {args.jobs} at a time, OMP_NUM_THREADS={threads}", flush=True)
    results: list[dict[str, Any]] = []
    todo: list[tuple[int, RunPlan]] = []
    for i, plan in enumerate(plans, 1):
        if plan.state == "finished":
            result = {"name": plan.name, "action": "skipped", "returncode": 0, "seconds": 0.0, "log": "",
                      "summary": None}
            results.append(result)
            print(f"[{i:>{len(str(total))}}/{total}] {plan.name:<28} skipped  (finished: {plan.reason})", flush=True)
        else:
            todo.append((i, plan))
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # threads only wait on subprocesses
        futures = {pool.submit(execute, plan, logdir, threads, args.show_output): i for i, plan in todo}
        for future in as_completed(futures):
            result = future.result()
            results.append(result)
            print(_result_line(futures[future], total, result), flush=True)
    failed = [r["name"] for r in results if r["returncode"] != 0]
    print(f"sweep: {total - len(todo)} skipped, {len(todo) - len(failed)} ran, {len(failed)} failed "
          f"in {time.perf_counter() - started:.0f} s" + (f": {', '.join(failed)}" if failed else ""), flush=True)
    if failed:
        raise SystemExit(1)
    return results


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
