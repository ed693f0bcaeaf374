"""Sweeps: a grid of runs (trials) on an existing engine, resumable, from a laptop to a cluster. A trial is a call of
a user's training function (Ray Tune's function trainable, ``fn(config)``: :mod:`capgeo_callbacks.sweeps.functions`)
or a command trial of a project's own (:class:`~capgeo_callbacks.sweeps.trials.TrialLike`).

    from capgeo_callbacks.sweeps import function_trials, launch
    launch(function_trials("mypackage.train:train", {"lr": [1e-3, 3e-3], "seed": [0, 1]}, "runs/grid"), jobs=2)

or from the command line, ``capgeo sweep mypackage.train:train --grid lr=0.001,0.003 seed=0,1 --jobs 2``
(:mod:`capgeo_callbacks.sweeps.cli`). Engines (:mod:`capgeo_callbacks.sweeps.engines`): ``ray`` (Ray Tune: a local
Ray, or a cluster with ``address``) and ``submitit`` (Slurm, or local processes). Every engine runs the same trial
function (:func:`~capgeo_callbacks.sweeps.trials.run_trial`) and every caller the same definition of finished
(:func:`~capgeo_callbacks.sweeps.trials.run_state`): a finished trial is skipped, an interrupted one resumes from its
last checkpoint. Ray and submitit are the ``sweep`` extra (``pip install 'capgeo-callbacks[sweep]'``), imported only
when an engine starts.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from capgeo_callbacks.sweeps.engines import (
    CallbackFactory,
    Outcome,
    capability_stopper,
    no_callbacks,
    run_ray,
    run_submitit,
)
from capgeo_callbacks.sweeps.functions import RESERVED_KEYS, FunctionTrial, function_trials, resolve_function
from capgeo_callbacks.sweeps.trials import (
    LOG_NAME,
    TRIAL_RECORD,
    Trial,
    TrialFailed,
    TrialLike,
    run_state,
    run_trial,
    source_provenance,
    summary_of,
)

__all__ = ["ENGINES", "LOG_NAME", "RESERVED_KEYS", "TRIAL_RECORD", "FunctionTrial", "Outcome", "TrialFailed",
           "Trial", "TrialLike", "add_launch_arguments", "capability_stopper", "function_trials", "launch",
           "launch_with", "no_callbacks", "outcome_line", "resolve_function", "run_state", "run_trial",
           "source_provenance", "summary_of"]

ENGINES = ("ray", "submitit")


def outcome_line(index: int, total: int, outcome: Outcome) -> str:
    """One line of a launch's output about a trial."""
    head = f"[{index:>{len(str(total))}}/{total}] {outcome.trial.key:<36}"
    if outcome.action == "failed":
        return f"{head} FAILED after {outcome.seconds:.0f} s: {outcome.message}"
    if outcome.action in ("skipped", "not finished"):
        return f"{head} {outcome.action}" + (f" ({outcome.message})" if outcome.message else "")
    if outcome.summary is None:  # a function that wrote no capgeo summary
        return f"{head} {outcome.action:<8} {outcome.seconds:7.1f} s"
    summary = outcome.summary
    stopped = f", stopped: {summary['stopped']['reason']}" if summary.get("stopped") else ""
    return (f"{head} {outcome.action:<8} {outcome.seconds:7.1f} s  steps {summary.get('steps')}, acquisition "
            f"{summary.get('acquisition_step')}, verdict {summary.get('verdict')}{stopped}")


def launch(trials: Sequence[TrialLike], engine: str = "ray", jobs: int | None = 1, address: str | None = None,
           callbacks: CallbackFactory = no_callbacks, cpus: int | None = None, storage: Path | None = None,
           seconds: float | None = None, cluster: str | None = None, slurm: Mapping[str, Any] | None = None,
           name: str = "capgeo", on_outcome: Callable[[Outcome], Any] | None = None, quiet: bool = False,
           env: Mapping[str, str] | None = None) -> list[Outcome]:
    """Run the unfinished ``trials`` on ``engine``; print one line per trial as it ends (unless ``quiet``).

    Args:
        trials: the trials (:class:`FunctionTrial`, or command trials), most important first.
        engine: ``ray`` or ``submitit``.
        jobs: trials at once (None: as many as the resources allow; Ray only).
        address: Ray only: a cluster to join (None: a local Ray).
        callbacks: builds each command trial's extra Lightning callbacks where it runs (e.g.
            :func:`capability_stopper`); a training function builds its own Trainer, so it takes none.
        cpus: Ray only: cores of a local Ray (None: all).
        storage: the engine's own folder (Tune's experiment folder; submitit's logs).
        seconds: a deadline from now: trials still running then are stopped and resume at the next launch.
        cluster: submitit only: ``slurm``, ``local`` or None (Slurm where it exists).
        slurm: submitit only: more executor parameters (``{"slurm_partition": "gpu"}``).
        name: the engine's name for the experiment.
        on_outcome: called with each trial's outcome as it ends (e.g. to export finished summaries).
        quiet: print nothing.
        env: environment for every trial (default: the commit of the current folder's git checkout, if any,
            :func:`source_provenance`), which a trial's record and summary name.

    Returns:
        One outcome per trial, in the order given.

    Raises:
        ValueError: on an unknown engine, repeated trial folders, a trial whose check fails (a training function
            that cannot be found), or ``callbacks`` with function trials (before any starts).
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    roots = [trial.root for trial in trials]
    if len(set(roots)) != len(roots):
        raise ValueError("trial folders must be unique (a name repeats within a log folder)")
    for trial in trials:
        trial.check()  # a command's check of its arguments, or the function found: before any trial starts
    functions = [trial.key for trial in trials if trial.kind == "function"]
    if functions and callbacks is not no_callbacks:
        raise ValueError(f"callbacks add Lightning callbacks to command trials; a training function builds its own "
                         f"Trainer (add them there): {', '.join(functions[:3])}{' ...' if len(functions) > 3 else ''}")
    total = len(trials)
    index = {trial.root: i for i, trial in enumerate(trials, 1)}
    show = (lambda text: None) if quiet else (lambda text: print(text, flush=True))  # noqa: E731
    outcomes: dict[Path, Outcome] = {}
    todo = []
    for trial in trials:
        state, reason = trial.state()
        if state == "finished":
            outcomes[trial.root] = Outcome(trial, "skipped", message=f"finished: {reason}")
            show(outcome_line(index[trial.root], total, outcomes[trial.root]))
        else:
            todo.append(trial)
    where = (address or "a local Ray") if engine == "ray" else f"submitit ({cluster or 'auto'})"
    show(f"launch: {total} trials, {len(todo)} to run on {where}, {jobs or 'as many as fit'} at a time")

    def ended(outcome: Outcome) -> None:
        show(outcome_line(index[outcome.trial.root], total, outcome))
        if on_outcome is not None:
            on_outcome(outcome)

    started = time.time()
    if todo:
        if engine == "ray":
            ran = run_ray(todo, jobs=jobs, address=address, callbacks=callbacks, storage=storage, name=name,
                          cpus=cpus, on_outcome=ended, deadline=None if seconds is None else started + seconds, env=env)
        else:
            ran = run_submitit(todo, jobs=jobs or len(todo), folder=storage, cluster=cluster, callbacks=callbacks,
                               seconds=seconds, slurm=slurm, on_outcome=ended, env=env)
        outcomes.update({outcome.trial.root: outcome for outcome in ran})
    ordered = [outcomes[trial.root] for trial in trials]
    counts: dict[str, int] = {}
    for outcome in ordered:
        counts[outcome.action] = counts.get(outcome.action, 0) + 1
    failed = [outcome.trial.key for outcome in ordered if outcome.action == "failed"]
    show(f"launch: {', '.join(f'{n} {action}' for action, n in counts.items())} in {time.time() - started:.0f} s"
         + (f"; failed: {', '.join(failed)}" if failed else ""))
    return ordered


def add_launch_arguments(parser: argparse.ArgumentParser, workers: int = 2) -> None:
    """The launch options of a command that runs a fixed list of trials: ``--workers``, ``--engine``, ``--address``
    (read by :func:`launch_with`)."""
    parser.add_argument("--workers", type=int, default=workers, help=f"trials at once (default: {workers})")
    parser.add_argument("--engine", choices=ENGINES, default="ray",
                        help="ray: Ray Tune, a local Ray unless --address; submitit: Slurm, or local processes where "
                             "there is no Slurm (default: ray)")
    parser.add_argument("--address", default=None, help="join the Ray cluster at this address (ray start --head "
                        "prints it; 'auto': the one this machine belongs to)")


def launch_with(trials: Sequence[TrialLike], args: argparse.Namespace, **options: Any) -> list[Outcome]:
    """:func:`launch` with the options :func:`add_launch_arguments` parsed."""
    return launch(trials, engine=args.engine, jobs=args.workers, address=args.address, **options)
