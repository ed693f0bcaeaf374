"""Sweep train.py over tasks x difficulties x sizes (x seeds), or a training function of one's own over a grid of its
settings, on Ray Tune or submitit, skipping finished runs and resuming others.

    python sweep.py --tasks mod sort --difficulties hard --sizes xs s --logdir runs/sweep --fraction 0.25 --jobs 2
    python sweep.py ... --address auto                 # on the Ray cluster this machine belongs to (docs/sweeps.md)
    python sweep.py ... --engine submitit              # Slurm (or local processes where there is none)
    python -m study.record.report runs/sweep
    python sweep.py --function mypackage.train:train --grid lr=0.001,0.003 seed=0,1 --logdir runs/grid --jobs 2

Each run is one trial of the launcher (:mod:`launch`), writing to ``LOGDIR/TASK-DIFFICULTY-SIZE-sSEED`` (train.py's
own naming), with its output in ``run.log`` beside the run's ``version_*`` folders. What the folder holds decides
what is done (:func:`launch.run_state`, the one definition of finished): finished runs are skipped, interrupted ones
resume from ``checkpoints/last.ckpt``, anything else starts afresh.

``--function MODULE:NAME`` runs a function (Ray Tune's function trainable, ``fn(config)``; :mod:`launch.functions`)
once per point of ``--grid``, in ``LOGDIR/key=value,...``.

``--fraction F`` runs the first F of each run's budget: train.py's ``--stop-at-step``, with the
learning-rate schedule and evaluation cadence of the whole budget, so the stopped run is exactly the start
of the full one and the report's progress axis (step / max_steps) stays comparable across sizes.

Threads: each run holds ``--threads`` cores (default cores // jobs), and its ``OMP_NUM_THREADS`` is that count, so
``--jobs 2`` on a 2-core machine runs two single-threaded runs side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tasks
from capgeo_callbacks.callbacks.capability_stopper import CapabilityStopper
from launch import ENGINES, LOG_NAME, FunctionTrial, Outcome, Trial, TrialLike, function_trials, launch, no_callbacks
from launch.trials import train_args
from models import SIZES

__all__ = ["LOG_NAME", "RESERVED_FLAGS", "main", "parse_args", "parse_grid", "plan_runs", "threads_per_run"]

# train.py flags the sweep sets itself for every run; in --extra-args they would break naming or resuming.
RESERVED_FLAGS = ("--task", "--difficulty", "--size", "--seed", "--logdir", "--name", "--resume", "--stop-at-step")


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
    cpus: float = 1.0,
    gpus: float = 0.0,
) -> list[Trial]:
    """Every run of the sweep, in task, difficulty, size, seed order, as trials of the launcher.

    Each run's arguments are checked by ``train.parse_args`` here, so a bad extra argument fails before
    any run starts. A trial's ``tags`` hold its task, difficulty, size, seed, ``max_steps`` (the schedule's length)
    and ``stop_at_step`` (where it ends).

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
        cpus: cores each run holds (its thread count).
        gpus: the share of a GPU each run holds.

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
    trials: list[Trial] = []
    for task in tasks_:
        for difficulty in difficulties:
            for size in sizes:
                for seed in seeds:
                    argv: tuple[str, ...] = ("--task", task, "--difficulty", difficulty, "--size", size,
                                             "--seed", str(seed), *extra_args)
                    args = train_args(argv)
                    expected = (task, difficulty, size, seed, f"{task}-{difficulty}-{size}-s{seed}", False,
                                args.max_steps)
                    if (args.task, args.difficulty, args.size, args.seed, args.name, args.resume,
                            args.stop_at_step) != expected:
                        # an abbreviated flag (argparse accepts --se for --seed) slipped past the check above
                        raise ValueError(f"--extra-args {' '.join(extra_args)} override a flag the sweep sets "
                                         f"({', '.join(RESERVED_FLAGS)})")
                    stop = args.max_steps
                    if fraction is not None:  # in (0, 1], so 1 <= stop <= max_steps, as train.py requires
                        stop = max(1, round(fraction * args.max_steps))
                        argv = (*argv, "--stop-at-step", str(stop))
                    trials.append(Trial(args.name, argv, Path(logdir), {
                        "task": task, "difficulty": difficulty, "size": size, "seed": seed,
                        "max_steps": args.max_steps, "stop_at_step": stop}, cpus=cpus, gpus=gpus))
    return trials


def _check_choices(kind: str, given: Sequence[str], valid: Sequence[str]) -> None:
    unknown = [name for name in given if name not in valid]
    if unknown:
        raise ValueError(f"unknown {kind}(s) {', '.join(map(repr, unknown))}; valid: {', '.join(valid)}")


# train.py sweeps' own options: their defaults, and what --function says when one is given with it
TRAIN_ONLY = {"difficulties": ["hard"], "sizes": [next(iter(SIZES))], "seeds": [0], "fraction": None,
              "stop_when_learned": False, "capability_stopper": False, "extra_args": []}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The sweep's command line; ``--extra-args`` takes everything after it, for train.py."""
    parser = argparse.ArgumentParser(
        description="Run train.py over tasks x difficulties x sizes x seeds, or a training function of your own over "
                    "a grid of its settings, on Ray Tune (or submitit); skip finished runs, resume others.",
        epilog="Then: python -m study.record.report LOGDIR. Clusters and training functions: docs/sweeps.md",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--tasks", nargs="+", metavar="TASK", help=f"train.py runs, of: {', '.join(tasks.TASKS)}")
    what.add_argument("--function", metavar="MODULE:NAME",
                      help="a training function fn(config) of your own (Ray Tune's function trainable), importable "
                           "from here, e.g. mypackage.train:train; config holds the grid point's settings, trial_dir "
                           "and resume_from (docs/sweeps.md)")
    parser.add_argument("--grid", nargs="+", action="extend", default=[], metavar="KEY=V1,V2",
                        help="with --function: each setting's values, comma-separated (numbers, true/false/null as "
                             "JSON, anything else a string); one trial per combination")
    parser.add_argument("--difficulties", nargs="+", default=None, metavar="DIFFICULTY",
                        help=f"of: {', '.join(tasks.DIFFICULTIES)} (default: hard)")
    parser.add_argument("--sizes", nargs="+", default=None, metavar="SIZE",
                        help=f"of: {', '.join(SIZES)} (default: {next(iter(SIZES))})")
    parser.add_argument("--seeds", nargs="+", type=int, default=None, metavar="SEED", help="seeds (default: 0)")
    parser.add_argument("--logdir", default="runs/sweep", help="log folder of the sweep (default: runs/sweep)")
    parser.add_argument("--fraction", type=float, default=None,
                        help="run this share of each run's step budget, on the whole budget's schedule "
                             "(train.py --stop-at-step); a larger share later resumes the same runs")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (default: 1)")
    parser.add_argument("--threads", type=int, default=None,
                        help="cores (and OMP_NUM_THREADS) per run (default: CPU cores // jobs, at least 1)")
    parser.add_argument("--gpus", type=float, default=0.0,
                        help="share of a GPU per run, e.g. 0.25 for four runs on one GPU (default: 0)")
    parser.add_argument("--engine", choices=ENGINES, default="ray",
                        help="ray: Ray Tune, a local Ray unless --address; submitit: Slurm, or local processes "
                             "where there is no Slurm (default: ray)")
    parser.add_argument("--address", default=None,
                        help="join the Ray cluster at this address (ray start --head prints it; 'auto': the one this "
                             "machine belongs to)")
    parser.add_argument("--slurm", nargs="+", default=[], metavar="KEY=VALUE",
                        help="with --engine submitit: Slurm options, e.g. partition=gpu time=240 (slurm_KEY)")
    parser.add_argument("--stop-when-learned", action="store_true", default=None,
                        help="end each run 8 evaluations after val/acc has held 0.9 (passed to train.py; such a run "
                             "counts as finished)")
    parser.add_argument("--capability-stopper", action="store_true", default=None,
                        help="end runs whose capability will not arrive within the budget (CapabilityStopper with its "
                             "defaults, docs/sweeps.md); a run it stopped counts as finished")
    parser.add_argument("--dry-run", action="store_true", help="list the runs and what would be done, run nothing")
    parser.add_argument("--extra-args", nargs=argparse.REMAINDER, default=None,
                        help="everything after it goes to train.py (e.g. --extra-args --measures all --eval-points 64)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    if args.gpus < 0:
        parser.error(f"--gpus must be at least 0, got {args.gpus}")
    if args.address is not None and args.engine != "ray":
        parser.error("--address joins a Ray cluster: it needs --engine ray")
    malformed = [item for item in args.slurm if "=" not in item]
    if malformed:
        parser.error(f"--slurm takes KEY=VALUE pairs, got {' '.join(malformed)}")
    args.slurm = {f"slurm_{key}": value for key, _, value in (item.partition("=") for item in args.slurm)}
    args.threads = threads_per_run(args.jobs, args.threads)
    if args.function is not None:
        given = [f"--{name.replace('_', '-')}" for name in TRAIN_ONLY if getattr(args, name) is not None]
        if given:
            parser.error(f"{', '.join(given)} apply to train.py sweeps (--tasks), not to --function; a function's "
                         "settings, seeds included, go in --grid (e.g. --grid seed=0,1,2)")
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # the function's package, from where the sweep is started (as python -m)
        try:
            args.trials = function_trials(args.function, parse_grid(args.grid), args.logdir, cpus=args.threads,
                                          gpus=args.gpus)
        except ValueError as err:
            parser.error(str(err))
        return args
    if args.grid:
        parser.error("--grid gives a training function's settings: it needs --function")
    for name, default in TRAIN_ONLY.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.stop_when_learned and "--stop-when-learned" not in args.extra_args:
        args.extra_args = [*args.extra_args, "--stop-when-learned"]
    try:
        args.trials = plan_runs(args.tasks, args.difficulties, args.sizes, args.seeds, args.logdir,
                                fraction=args.fraction, extra_args=args.extra_args, cpus=args.threads, gpus=args.gpus)
    except ValueError as err:
        parser.error(str(err))
    return args


def parse_grid(items: Sequence[str]) -> dict[str, list[Any]]:
    """``["lr=0.001,0.003", "seed=0,1"]`` as ``{"lr": [0.001, 0.003], "seed": [0, 1]}``: each value read as JSON
    (numbers, ``true``, ``false``, ``null``), else kept as a string.

    Raises:
        ValueError: an item without ``KEY=``, a key given twice, or an empty value.
    """
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, equals, values = item.partition("=")
        if not equals or not key:
            raise ValueError(f"--grid takes KEY=V1,V2,... items, got {item!r}")
        if key in grid:
            raise ValueError(f"--grid gives {key!r} twice")
        texts = values.split(",")
        if "" in texts:
            raise ValueError(f"--grid {item!r} has an empty value")
        grid[key] = [_value(text) for text in texts]
    return grid


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


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


def capability_stopper(trial: TrialLike) -> list[CapabilityStopper]:
    """The stopper ``--capability-stopper`` adds to every run (built where the run runs)."""
    return [CapabilityStopper()]


def main(argv: Sequence[str] | None = None) -> list[Outcome]:
    """Run the sweep; returns one outcome per run (finished runs have action ``skipped``); exits 1 if any failed."""
    args = parse_args(argv)
    trials: list[TrialLike] = args.trials
    total = len(trials)
    if args.dry_run:
        for i, trial in enumerate(trials, 1):
            state, reason = trial.state()
            action = {"finished": "skip", "resume": "resume", "fresh": "run"}[state]
            steps = ("" if isinstance(trial, FunctionTrial) else
                     f"steps {trial.tags['stop_at_step']} of {trial.tags['max_steps']}; ")
            print(f"[{i}/{total}] {trial.name:<28} {action:<7} ({reason}); {steps}{trial.describe(state == 'resume')}")
        return []
    Path(args.logdir).mkdir(parents=True, exist_ok=True)
    print(f"sweep: {total} runs in {args.logdir}, {args.jobs} at a time, OMP_NUM_THREADS={args.threads}", flush=True)
    outcomes = launch(trials, engine=args.engine, jobs=args.jobs, address=args.address,
                      callbacks=capability_stopper if args.capability_stopper else no_callbacks,
                      storage=Path(args.logdir).absolute() / ".engine", slurm=args.slurm, name="sweep")
    if any(outcome.action == "failed" for outcome in outcomes):
        raise SystemExit(1)
    return outcomes


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
