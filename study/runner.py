"""Run many train.py jobs side by side, resumably, with a deadline: the engine of every study phase.

A job is a train.py command line with a run folder of its own (``LOGDIR/NAME``). ``run_jobs`` skips jobs that
already left a summary, starts the rest ``workers`` at a time (one thread each unless told otherwise), and,
when a deadline is given, stops starting new jobs and kills the running ones at it (their folders are left
for ``--resume``). Each job's output goes to ``LOGDIR/NAME/run.log``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capgeo_callbacks.run.reading import newest_summary, newest_version

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Job:
    """One train.py run of a study phase.

    Attributes:
        name: the run folder's name under ``logdir`` (unique in a phase).
        argv: train.py arguments, without ``--logdir``, ``--name`` or ``--resume``.
        logdir: the phase's log folder.
        tags: what the phase wants to remember about the job (variant, seed...).
    """

    name: str
    argv: tuple[str, ...]
    logdir: Path
    tags: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def root(self) -> Path:
        return self.logdir / self.name


def summary_of(job: Job) -> dict[str, Any] | None:
    """The newest summary the job's folder holds (a finished run), or None."""
    return newest_summary(job.root)


def require_clean_tree(what: str, root: Path = ROOT) -> str:
    """The commit of ``root``, or exit when its tracked files have uncommitted changes: a registered or calibration
    run must name the code it ran."""
    try:
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, check=True, timeout=30).stdout.strip()
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as err:
        raise SystemExit(f"{what} needs a git checkout to record its commit: {err}") from err
    if status:
        raise SystemExit(f"{what} refuses a tree with uncommitted changes (commit them, or run from a clean "
                         f"worktree):\n{status}")
    return commit


def _command(job: Job, python: str) -> list[str]:
    argv = [python, str(ROOT / "train.py"), *job.argv, "--logdir", str(job.logdir), "--name", job.name,
            "--no-progress"]
    newest = newest_version(job.root)
    if newest is not None and (newest / "checkpoints" / "last.ckpt").is_file():
        argv.append("--resume")
    return argv


def run_jobs(jobs: Sequence[Job], workers: int, threads: int = 1, deadline: float | None = None,
             env: dict[str, str] | None = None, python: str = sys.executable,
             on_finished: Callable[[dict[str, str]], Any] | None = None) -> dict[str, str]:
    """Run the unfinished ``jobs``, ``workers`` at a time, in the given order (module docstring).

    Args:
        jobs: the jobs, most important first.
        workers: runs at once.
        threads: ``OMP_NUM_THREADS`` of each run.
        deadline: ``time.time()`` after which no job starts and running ones are killed (None: none).
        env: extra environment for every run.
        python: the interpreter.
        on_finished: called with the states so far each time a job ends.

    Returns:
        Each job's state by name (``folder/name`` where names repeat across folders): ``done``, ``skipped``
        (already finished), ``failed (exit N)`` or ``killed``.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    names = [job.name for job in jobs]
    if len(set(zip(names, (j.logdir for j in jobs), strict=True))) != len(jobs):
        raise ValueError("job names must be unique within a log folder")
    # one key per job: its name, or folder/name where a name repeats across folders (the ablation's schedules);
    # keying the running jobs by a repeated name let more than ``workers`` run at once
    unique = len(set(names)) == len(names)
    key = {id(job): job.name if unique else f"{job.logdir.name}/{job.name}" for job in jobs}
    states: dict[str, str] = {}
    queue = []
    for job in jobs:
        if summary_of(job) is not None:
            states[key[id(job)]] = "skipped"
        else:
            queue.append(job)
    child_env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), **(env or {})}
    running: dict[str, tuple[subprocess.Popen, Any, float]] = {}
    total, started_all = len(queue), time.time()
    try:
        while queue or running:
            for name, (process, log, started) in list(running.items()):
                code = process.poll()
                if code is None:
                    continue
                log.close()
                del running[name]
                states[name] = "done" if code == 0 else f"failed (exit {code})"
                print(f"[{time.time() - started_all:6.0f} s] {name}: {states[name]} in {time.time() - started:.0f} s "
                      f"({len(states) - sum(s == 'skipped' for s in states.values())}/{total})", flush=True)
                if on_finished is not None:
                    on_finished(dict(states))
            past = deadline is not None and time.time() >= deadline
            while queue and len(running) < workers and not past:
                job = queue.pop(0)
                job.root.mkdir(parents=True, exist_ok=True)
                log = open(job.root / "run.log", "a")  # noqa: SIM115 - closed when the run ends
                command = _command(job, python)
                log.write(f"\n$ {' '.join(command)}\n")
                log.flush()
                process = subprocess.Popen(command, cwd=ROOT, env=child_env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True)
                running[key[id(job)]] = (process, log, time.time())
            if past:
                for name, (process, log, _) in running.items():
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    log.close()
                    states[name] = "killed"
                running.clear()
                for job in queue:
                    states[key[id(job)]] = "not started"
                queue = []
            time.sleep(0.5)
    finally:
        for process, log, _ in running.values():
            os.killpg(process.pid, signal.SIGKILL)
            log.close()
    return states
