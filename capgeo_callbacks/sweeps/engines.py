"""The engines that run trials: Ray Tune (a local Ray, or a cluster's with ``address``) and submitit (Slurm, or its
local executor where Ray is absent). Both call the same trial function,
:func:`~capgeo_callbacks.sweeps.trials.run_trial`, on either kind of trial (a command, a user's training function).
Ray and submitit are the ``sweep`` extra, imported only here, when an engine starts.

Each engine returns one :class:`Outcome` per trial given: finished trials are skipped before any engine starts;
a trial that fails is reported with its message and the others go on.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capgeo_callbacks.sweeps.trials import TrialFailed, TrialLike, run_trial, source_provenance, summary_of

CallbackFactory = Callable[[TrialLike], Sequence[Any]]  # a command trial's extra Lightning callbacks, built in it


@dataclass(frozen=True)
class Outcome:
    """What became of one trial.

    Attributes:
        trial: the trial.
        action: ``skipped`` (finished before), ``done``, ``resumed``, ``failed``, or ``not finished`` (stopped by a
            deadline, or killed, with its folder left for the next launch to resume).
        seconds: wall seconds the engine spent on it.
        message: the error of a failed trial; else what the folder held before.
        summary: the run's summary when it wrote one.
    """

    trial: TrialLike
    action: str
    seconds: float = 0.0
    message: str = ""
    summary: Mapping[str, Any] | None = None


def no_callbacks(trial: TrialLike) -> Sequence[Any]:
    return ()


def capability_stopper(trial: TrialLike) -> Sequence[Any]:
    """A :class:`~capgeo_callbacks.callbacks.capability_stopper.CapabilityStopper` with its defaults for each command
    trial (``launch(..., callbacks=capability_stopper)``), built where the trial runs; a run it stops is finished."""
    from capgeo_callbacks.callbacks.capability_stopper import CapabilityStopper

    return [CapabilityStopper()]


def _pythonpath(trials: Sequence[TrialLike] = ()) -> str:
    """PYTHONPATH with the current folder first (a training function's module, as ``python -m`` finds it there), then
    the folders the trials' code is imported from, then what it was."""
    given = filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))
    roots = [str(root) for trial in trials for root in trial.import_roots]
    return os.pathsep.join(dict.fromkeys([os.getcwd(), *roots, *given]))


# ------------------------------------------------------------------------------------------------ Ray Tune


def start_ray(address: str | None = None, cpus: int | None = None, trials: Sequence[TrialLike] = (),
              env: Mapping[str, str] | None = None) -> None:
    """Join the Ray cluster at ``address``, or start a local Ray (with ``cpus`` cores, default all) when None; its
    workers find the current folder and ``trials``' code on their ``PYTHONPATH``, and get ``env`` (default: the
    current folder's :func:`~capgeo_callbacks.sweeps.trials.source_provenance`).

    Raises:
        SystemExit: when Ray is not installed, or no cluster answers at ``address``.
    """
    if address is not None:
        check_reachable(address)
    try:
        import ray
    except ImportError as err:
        raise SystemExit("the Ray engine needs Ray: pip install 'capgeo-callbacks[sweep]' (or use --engine "
                         "submitit)") from err
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0, Tune prints nothing: the launcher's lines say it
    os.environ.setdefault("RAY_worker_niceness", "0")  # a local Ray's trials run at the launcher's own niceness
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")  # Ctrl-C ends the launch (and whatever was to follow it)
    env = {"PYTHONPATH": _pythonpath(trials), **(source_provenance() if env is None else env)}
    options: dict[str, Any] = {"runtime_env": {"env_vars": env}, "log_to_driver": False, "include_dashboard": False,
                               "configure_logging": False}
    try:
        if address is None:
            ray.init(num_cpus=cpus, **options)
        else:
            ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise SystemExit(f"cannot reach a Ray cluster at --address {address}: {err}") from err


def check_reachable(address: str, seconds: float = 5.0) -> None:
    """Fail at once when nothing listens at a ``host:port`` Ray address (Ray itself retries for minutes); ``auto``
    and addresses without a port are left to Ray."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=seconds).close()
    except OSError as err:
        raise SystemExit(f"cannot reach a Ray cluster at --address {address}: {err} (is `ray start --head` running "
                         f"there, and is the port open?)") from err


def run_ray(trials: Sequence[TrialLike], jobs: int | None = None, address: str | None = None,
            callbacks: CallbackFactory = no_callbacks, report: bool = True, storage: Path | None = None,
            name: str = "capgeo", cpus: int | None = None, on_outcome: Callable[[Outcome], Any] | None = None,
            deadline: float | None = None, env: Mapping[str, str] | None = None) -> list[Outcome]:
    """Run ``trials`` as one Ray Tune experiment: a grid over the trials, each with its CPUs and share of a GPU.

    Args:
        trials: unfinished trials (the launcher skips finished ones first).
        jobs: trials at once (None: as many as the resources allow).
        address: a Ray cluster to join (``ray start --head`` prints it); None starts a local Ray.
        callbacks: builds each command trial's extra Lightning callbacks where it runs.
        report: report each evaluation of a command trial (``val/acc``, RankMe, forecasts) to Tune (a training
            function reports what it likes itself, ``ray.tune.report``); every trial's end is reported.
        storage: Tune's own experiment folder (its ``result.json`` per trial); default ``~/ray_results``.
        name: the Tune experiment's name.
        cpus: cores of a local Ray (None: all).
        on_outcome: called with each trial's outcome as it ends.
        deadline: ``time.time()`` after which running trials are stopped (their folders resume later).
        env: environment for every trial (default: the current folder's commit, ``source_provenance()``).

    Returns:
        One outcome per trial, in the order given.
    """
    env = source_provenance() if env is None else dict(env)
    start_ray(address, cpus, trials, env)
    from ray import tune

    ordered = list(trials)

    def trainable(config: dict[str, Any]) -> None:
        trial = ordered[config["index"]]
        extra = list(callbacks(trial))
        if report and trial.kind == "command":
            from capgeo_callbacks.integrations.tuning import TuneReportCallback

            extra.append(TuneReportCallback())
        result = run_trial(trial, callbacks=extra, env=env)
        summary = result["summary"] or {}
        tune.report({"action": result["action"], "steps": summary.get("steps"), "done_trial": True,
                     "acquisition_step": summary.get("acquisition_step")})

    started: dict[int, float] = {}
    outcomes: dict[int, Outcome] = {}

    class Lines(tune.Callback):
        """One line per trial as it ends (the driver's view; Tune's own table is off)."""

        def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            started[trial.config["index"]] = time.time()

        def _end(self, trial: Any, action: str, message: str = "") -> None:
            index = trial.config["index"]
            found = ordered[index]
            outcome = Outcome(found, action, time.time() - started.get(index, time.time()), message,
                              summary_of(found) if action in ("done", "resumed") else None)
            outcomes[index] = outcome
            if on_outcome is not None:
                on_outcome(outcome)

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            result = trial.last_result or {}
            self._end(trial, result.get("action", "not finished") if result.get("done_trial") else "not finished")

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            self._end(trial, "failed", _error_text(trial))

    resources = lambda config: {"cpu": ordered[config["index"]].cpus,  # noqa: E731
                                "gpu": ordered[config["index"]].gpus}
    stop = None if deadline is None else (lambda trial_id, result: time.time() >= deadline)
    tuner = tune.Tuner(
        tune.with_resources(trainable, resources),
        param_space={"index": tune.grid_search(list(range(len(ordered))))},
        tune_config=tune.TuneConfig(max_concurrent_trials=jobs, reuse_actors=False),
        run_config=tune.RunConfig(name=name, storage_path=str(storage) if storage else None, verbose=0,
                                  callbacks=[Lines()], stop=stop, log_to_file=True,
                                  failure_config=tune.FailureConfig(max_failures=0, fail_fast=False)),
    )
    tuner.fit()
    return [outcomes.get(i, Outcome(trial, "not finished")) for i, trial in enumerate(ordered)]


def _error_text(trial: Any) -> str:
    """The last line of a failed Tune trial's error (our TrialFailed message where the trial function raised)."""
    path = getattr(trial, "error_file", None) or ""
    text = ""
    with contextlib.suppress(OSError):
        text = Path(path).read_text() if path else ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    named = [line for line in lines if "TrialFailed" in line]
    last = (named or lines or [f"trial {trial} failed (no error file)"])[-1]
    return last.split("TrialFailed: ", 1)[-1]


# ------------------------------------------------------------------------------------------------ submitit


def run_chunk(trials: Sequence[TrialLike], callbacks: CallbackFactory = no_callbacks,
              env: Mapping[str, str] | None = None) -> list[tuple[str, str, str]]:
    """A submitit job: its trials one after another, each through the trial function; a failed trial is recorded
    and the next one runs. Returns ``(key, action, message)`` per trial."""
    done = []
    for trial in trials:
        try:
            result = run_trial(trial, callbacks=callbacks(trial), env=env)
            done.append((trial.key, result["action"], result["reason"]))
        except TrialFailed as err:
            done.append((trial.key, "failed", str(err)))
    return done


def run_submitit(trials: Sequence[TrialLike], jobs: int = 1, folder: Path | None = None, cluster: str | None = None,
                 callbacks: CallbackFactory = no_callbacks, seconds: float | None = None,
                 slurm: Mapping[str, Any] | None = None, on_outcome: Callable[[Outcome], Any] | None = None,
                 env: Mapping[str, str] | None = None) -> list[Outcome]:
    """Run ``trials`` as ``jobs`` submitit jobs (trial i in job i mod jobs), on Slurm or, with ``cluster="local"``
    (or where there is no Slurm), as local processes.

    Args:
        trials: unfinished trials.
        jobs: jobs at once (each runs its share of the trials in turn).
        folder: submitit's own folder (its logs and pickles); default ``<first trial's logdir>/.submitit``.
        cluster: ``slurm``, ``local`` or None (submitit decides: Slurm where ``sbatch`` exists).
        callbacks: builds each command trial's extra Lightning callbacks where it runs.
        seconds: each job's time limit (a trial cut by it resumes at the next launch).
        slurm: more executor parameters (e.g. ``{"slurm_partition": "gpu"}``).
        on_outcome: called with each trial's outcome once its job ends.
        env: environment for every trial (default: the current folder's commit, ``source_provenance()``).
    """
    try:
        import submitit
    except ImportError as err:
        raise SystemExit("the submitit engine needs submitit: pip install 'capgeo-callbacks[sweep]'") from err
    ordered = list(trials)
    if not ordered:
        return []
    os.environ["PYTHONPATH"] = _pythonpath(ordered)  # local jobs inherit this process's environment
    folder = folder or ordered[0].logdir / ".submitit"
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    cpus = max(math.ceil(t.cpus) for t in ordered)
    gpus = max(math.ceil(t.gpus) for t in ordered)
    minutes = 60 * 24 * 7 if seconds is None else max(1, int(seconds // 60))
    executor.update_parameters(name="capgeo", cpus_per_task=cpus, gpus_per_node=gpus, timeout_min=minutes,
                               **dict(slurm or {}))
    chunks = [ordered[i::jobs] for i in range(min(jobs, len(ordered)))]
    env = source_provenance() if env is None else dict(env)
    started = time.time()
    submitted = [executor.submit(run_chunk, chunk, callbacks, env) for chunk in chunks]
    outcomes: dict[str, Outcome] = {}
    for chunk, job in zip(chunks, submitted, strict=True):
        try:
            results = {key: (action, message) for key, action, message in job.result()}
        except Exception:  # noqa: BLE001 - a job killed (deadline, node) loses only its unfinished trials
            results = {}
            print(f"submitit job {job.job_id} ended before its trials did (time limit, or killed); its log: "
                  f"{job.paths.stderr}", flush=True)
        for trial in chunk:
            finished = trial.state()[0] == "finished"  # a job cut short may have finished some of its trials
            action, message = results.get(trial.key, ("done" if finished else "not finished", ""))
            outcome = Outcome(trial, action, time.time() - started, message,
                              summary_of(trial) if action in ("done", "resumed") else None)
            outcomes[trial.key] = outcome
            if on_outcome is not None:
                on_outcome(outcome)
    return [outcomes[trial.key] for trial in ordered]
