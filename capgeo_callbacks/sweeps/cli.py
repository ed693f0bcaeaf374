"""``capgeo sweep``: a training function of your own over a grid of its settings, on Ray Tune or submitit, skipping
finished trials and resuming interrupted ones.

    capgeo sweep my_module:train --grid lr=0.001,0.003 seed=0,1 --logdir runs/grid --jobs 2
    capgeo sweep my_module:train --config grid.json --address auto     # on the Ray cluster this machine belongs to
    capgeo sweep my_module:train --grid seed=0,1 --engine submitit     # Slurm (or local processes where there is none)

The function follows Ray Tune's function-trainable convention, ``train(config)``
(:mod:`capgeo_callbacks.sweeps.functions`), and is imported from the current folder or from what is installed. Each
trial runs in ``LOGDIR/key=value,...``. The engine options here (:func:`add_engine_arguments`, :func:`run`) are
shared with any front that plans its own trials.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from capgeo_callbacks.sweeps import ENGINES, Outcome, launch, no_callbacks
from capgeo_callbacks.sweeps.engines import CallbackFactory
from capgeo_callbacks.sweeps.functions import function_trials
from capgeo_callbacks.sweeps.trials import TrialLike

__all__ = ["add_engine_arguments", "check_engine_arguments", "main", "parse_args", "parse_grid", "read_config",
           "run", "threads_per_run"]


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Where and how the trials run: ``--logdir``, ``--jobs``, ``--threads``, ``--gpus``, ``--engine``,
    ``--address``, ``--slurm``, ``--dry-run`` (checked by :func:`check_engine_arguments`)."""
    parser.add_argument("--logdir", default="runs/sweep", help="log folder of the sweep (default: runs/sweep)")
    parser.add_argument("--jobs", type=int, default=1, help="trials at once (default: 1)")
    parser.add_argument("--threads", type=int, default=None,
                        help="cores (and OMP_NUM_THREADS) per trial (default: CPU cores // jobs, at least 1)")
    parser.add_argument("--gpus", type=float, default=0.0,
                        help="share of a GPU per trial, e.g. 0.25 for four trials on one GPU (default: 0)")
    parser.add_argument("--engine", choices=ENGINES, default="ray",
                        help="ray: Ray Tune, a local Ray unless --address; submitit: Slurm, or local processes "
                             "where there is no Slurm (default: ray)")
    parser.add_argument("--address", default=None,
                        help="join the Ray cluster at this address (ray start --head prints it; 'auto': the one this "
                             "machine belongs to)")
    parser.add_argument("--slurm", nargs="+", default=[], metavar="KEY=VALUE",
                        help="with --engine submitit: Slurm options, e.g. partition=gpu time=240 (slurm_KEY)")
    parser.add_argument("--dry-run", action="store_true", help="list the trials and what would be done, run nothing")


def check_engine_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit with the parser's error on a bad engine option; turn ``--slurm`` into submitit's parameters and fill in
    ``--threads``."""
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


def threads_per_run(jobs: int, threads: int | None = None, cores: int | None = None) -> int:
    """``OMP_NUM_THREADS`` for each trial: ``threads`` if given, else cores // jobs (at least 1), so parallel
    trials share the cores instead of each starting a thread per core."""
    if threads is not None:
        return threads
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))  # the cores this process may use (containers, taskset)
        except AttributeError:  # not on Linux
            cores = os.cpu_count() or 1
    return max(1, cores // jobs)


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


def read_config(path: str | Path) -> dict[str, list[Any]]:
    """A grid from a JSON object: a list is a setting's values, anything else its one value
    (``{"lr": [0.001, 0.003], "max_steps": 300}``; a setting whose one value is a list: ``[[...]]``).

    Raises:
        ValueError: a file that cannot be read, or that is not a JSON object.
    """
    try:
        found = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"--config {path}: {err}") from err
    if not isinstance(found, dict):
        raise ValueError(f"--config {path}: a JSON object of settings, got {type(found).__name__}")
    return {key: value if isinstance(value, list) else [value] for key, value in found.items()}


def run(trials: Sequence[TrialLike], args: argparse.Namespace, callbacks: CallbackFactory = no_callbacks,
        name: str = "sweep", detail: Callable[[TrialLike], str] = lambda trial: "") -> list[Outcome]:
    """List the trials (``--dry-run``), or launch them with the options :func:`add_engine_arguments` read; the engine's
    own files go to ``LOGDIR/.engine``. Exits 1 when a trial failed.

    Args:
        trials: the planned trials.
        args: the parsed options (checked by :func:`check_engine_arguments`).
        callbacks: each command trial's extra Lightning callbacks.
        name: the engine's name for the experiment.
        detail: more to say of a trial in the dry run's line (``steps 40 of 160; ``).

    Returns:
        One outcome per trial (finished ones ``skipped``); none for a dry run.
    """
    total = len(trials)
    if args.dry_run:
        for i, trial in enumerate(trials, 1):
            state, reason = trial.state()
            action = {"finished": "skip", "resume": "resume", "fresh": "run"}[state]
            print(f"[{i}/{total}] {trial.name:<28} {action:<7} ({reason}); {detail(trial)}"
                  f"{trial.describe(state == 'resume')}")
        return []
    Path(args.logdir).mkdir(parents=True, exist_ok=True)
    print(f"sweep: {total} runs in {args.logdir}, {args.jobs} at a time, OMP_NUM_THREADS={args.threads}", flush=True)
    outcomes = launch(trials, engine=args.engine, jobs=args.jobs, address=args.address, callbacks=callbacks,
                      storage=Path(args.logdir).absolute() / ".engine", slurm=args.slurm, name=name)
    if any(outcome.action == "failed" for outcome in outcomes):
        raise SystemExit(1)
    return outcomes


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``capgeo sweep``'s command line; the planned trials are ``args.trials``."""
    parser = argparse.ArgumentParser(
        prog="capgeo sweep",
        description="Run a training function of your own, fn(config) (Ray Tune's function trainable), once per point "
                    "of a grid of its settings, on Ray Tune (or submitit); skip finished trials, resume others. "
                    "Needs the sweep extra: pip install 'capgeo-callbacks[sweep]'.",
        epilog="config holds the grid point's settings, trial_dir (the trial's folder: write everything under it) and "
               "resume_from (trial_dir/checkpoints/last.ckpt where an interrupted start left one, else None).",
    )
    parser.add_argument("function", metavar="MODULE:FUNCTION",
                        help="the training function, importable from the current folder or installed, e.g. "
                             "my_module:train")
    parser.add_argument("--grid", nargs="+", action="extend", default=[], metavar="KEY=V1,V2",
                        help="each setting's values, comma-separated (numbers, true/false/null as JSON, anything else "
                             "a string); one trial per combination")
    parser.add_argument("--config", metavar="FILE.json",
                        help="settings from a JSON object (a list: the values; anything else: the one value); --grid "
                             "adds to them and replaces the keys it names")
    add_engine_arguments(parser)
    args = parser.parse_args(argv)
    check_engine_arguments(parser, args)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # the function's module, from where the sweep is started (as python -m)
    try:
        grid = {**(read_config(args.config) if args.config else {}), **parse_grid(args.grid)}
        args.trials = function_trials(args.function, grid, args.logdir, cpus=args.threads, gpus=args.gpus)
    except ValueError as err:
        parser.error(str(err))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sweep; 0 when every trial ended or was finished before, else exit 1."""
    args = parse_args(argv)
    run(args.trials, args, name="sweep")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
