"""A trial: one run with a folder of its own, what its folder says about it, and the one function that runs it on
any engine.

Two kinds of trial, both with the folder ``LOGDIR/NAME``:

- a *function* trial (:class:`~capgeo_callbacks.sweeps.functions.FunctionTrial`): a call of a user's training
  function (Ray Tune's function trainable, ``fn(config)``); it writes under its folder as it likes (its logger's
  folders, ``checkpoints/last.ckpt``) and the launcher keeps its record there (``capgeo_trial.json``);
- a *command* trial: a training command run in the trial's process that writes one ``version_*`` folder (a Lightning
  logger's) per start straight into its folder, resumes in the newest, and takes extra Lightning callbacks from the
  launcher (a capability stopper, the Tune reporter). A project defines its own command trials by following
  :class:`TrialLike` (a :class:`Trial` with what it runs); the launcher imports none of its code.

What the folder holds decides what a launch does with it (:func:`run_state`, the one definition every caller uses):

- finished (skipped): the newest ``capgeo_summary.json`` (a command's: of the newest ``version_*`` that has one; a
  function's: the newest written anywhere under its folder) whose ``steps`` reached the run's stop step (given by a
  command trial, else the ``stop_at_step`` or ``max_steps`` the summary records); or, for a run that stops once
  learned, whose accuracy held 0.9 (``labels.full_step``); or that a capability stopper ended (``stopped``); or, for
  a function, once the function has returned (its record says so);
- resumable: otherwise, when there is a ``checkpoints/last.ckpt`` (a command's: in the newest ``version_*``, where
  it resumes; a function's: in its folder, passed as ``config["resume_from"]``);
- fresh: anything else.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from capgeo_callbacks.run.reading import read_version_summary, versions
from capgeo_callbacks.run.summary import SUMMARY_FILENAME

LOG_NAME = "run.log"  # each trial's output, in its folder
LAST_CHECKPOINT = Path("checkpoints") / "last.ckpt"  # under a command's version folder, or a function's trial folder
TRIAL_RECORD = "capgeo_trial.json"  # the launcher's record of a function trial, in its folder
PROVENANCE = ("CAPGEO_COMMIT", "CAPGEO_TREE_CLEAN")  # what a trial on a copy without .git is told of the code

State = Literal["finished", "resume", "fresh"]
Kind = Literal["command", "function"]


class TrialLike(Protocol):
    """What the engines need of a trial (a command trial, :class:`~capgeo_callbacks.sweeps.functions.FunctionTrial`)."""

    name: str
    logdir: Path
    tags: Mapping[str, Any]
    cpus: float
    gpus: float
    kind: ClassVar[Kind]  # a command (takes extra Lightning callbacks) or a function (builds its own Trainer)

    @property
    def root(self) -> Path: ...

    @property
    def key(self) -> str: ...

    @property
    def import_roots(self) -> tuple[Path, ...]:
        """The folders its code is imported from, which the engines' workers need on ``PYTHONPATH``."""

    def check(self) -> None:
        """Raise a ValueError naming the problem when the trial cannot run (before any trial starts)."""

    def state(self) -> tuple[State, str]: ...

    def describe(self, resume: bool) -> str:
        """The trial's command, for its log."""

    def execute(self, resume: bool, callbacks: list[Any]) -> Mapping[str, Any] | None:
        """Run it in this process (threads already pinned, output already sent to its log); its summary."""


@dataclass(frozen=True)
class Trial:
    """What every trial is, whatever it runs: a name, its folder (``logdir / name``) and the resources it holds. A
    kind of trial adds what it runs after ``name`` (:class:`~capgeo_callbacks.sweeps.functions.FunctionTrial`: a
    function and its settings; a project's command trial: its arguments); the rest are keywords.

    Attributes:
        name: the trial folder's name under ``logdir`` (one folder, unique within it).
        logdir: the folder the trial folder is in.
        tags: what the caller wants to remember about it (phase, variant, seed...).
        cpus: CPU cores the trial holds (also its thread count).
        gpus: the share of a GPU it holds (0.25: four trials share one GPU).

    Raises:
        ValueError: a name that is not one folder's, or bad resources.
    """

    name: str
    _: KW_ONLY
    logdir: Path
    tags: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    cpus: float = 1.0
    gpus: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "logdir", Path(self.logdir).absolute())  # engines run trials from other folders
        if not self.name or self.name in (".", "..") or "/" in self.name or os.sep in self.name:
            raise ValueError(f"a trial's name is one folder's name, got {self.name!r}")
        if self.cpus <= 0 or self.gpus < 0:
            raise ValueError(f"trial {self.name}: cpus must be > 0 and gpus >= 0, got {self.cpus}, {self.gpus}")

    @property
    def root(self) -> Path:
        return self.logdir / self.name

    @property
    def key(self) -> str:
        """How reports name the trial: ``folder/name`` (names may repeat across folders)."""
        return f"{self.logdir.name}/{self.name}"

    @property
    def import_roots(self) -> tuple[Path, ...]:
        """None beyond the current folder, which the engines put on every worker's ``PYTHONPATH``."""
        return ()


def run_state(run_root: Path, stop_at_step: int | None = None, stop_when_learned: bool = False,
              function: bool = False) -> tuple[State, str]:
    """Whether a run folder holds a finished run, a resumable one, or nothing usable (module docstring).

    Args:
        run_root: the trial's folder (``LOGDIR/NAME``; a function's ``config["trial_dir"]``).
        stop_at_step: the step the run must reach (None: the ``stop_at_step``, else ``max_steps``, its summary
            records; a summary recording neither does not finish the run).
        stop_when_learned: whether the run stops once learned (then holding 0.9 is enough).
        function: the folder is a training function's: its summaries anywhere under it, its checkpoint in it, the
            launcher's record saying whether the function returned.

    Returns:
        The state and a short reason.
    """
    if function and (read_trial_record(run_root) or {}).get("returned"):
        return "finished", f"{TRIAL_RECORD}: the function returned"
    found = versions(run_root)
    for where, summary in run_summaries(run_root, function):
        steps = summary.get("steps")
        stop = stop_at_step if stop_at_step is not None else summary.get("stop_at_step", summary.get("max_steps"))
        if isinstance(steps, int) and isinstance(stop, int) and steps >= stop:
            return "finished", f"{where}: {steps} steps"
        full_step = (summary.get("labels") or {}).get("full_step")
        if stop_when_learned and full_step is not None:
            return "finished", f"{where}: held 0.9 from step {full_step}"
        if summary.get("stopped"):
            return "finished", f"{where}: stopped at step {steps} ({summary['stopped'].get('reason')})"
        break
    checkpoint = run_root / LAST_CHECKPOINT if function else found[0] / LAST_CHECKPOINT if found else None
    if checkpoint is not None and checkpoint.is_file():
        return "resume", checkpoint.relative_to(run_root).as_posix()
    started = any(run_root.iterdir()) if function and run_root.is_dir() else bool(found)
    return "fresh", "no checkpoint" if started else "new run"


def run_summaries(run_root: Path, function: bool = False) -> Iterator[tuple[str, dict[str, Any]]]:
    """The readable summaries of a run folder, newest first, each with where it is (relative to ``run_root``):
    a command's, one per ``version_*`` (highest first); a function's, every ``capgeo_summary.json`` under the folder
    (the newest written first)."""
    if not function:
        for version in versions(run_root):
            summary = read_version_summary(version)
            if summary is not None:
                yield version.name, summary
        return
    found = sorted(Path(run_root).rglob(SUMMARY_FILENAME), key=lambda path: path.stat().st_mtime_ns, reverse=True)
    for path in found:
        summary = read_version_summary(path.parent)
        if summary is not None:  # named by its folder, or by its own name in the trial's folder itself
            folder = path.parent.relative_to(run_root)
            yield (folder.as_posix() if folder.parts else SUMMARY_FILENAME), summary


def read_trial_record(run_root: Path) -> dict[str, Any] | None:
    """The launcher's record of a function trial (``capgeo_trial.json``), or None where there is none readable."""
    try:
        found = json.loads((Path(run_root) / TRIAL_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def summary_of(trial: TrialLike) -> dict[str, Any] | None:
    """The summary of a finished trial (:func:`run_state`), or None (not finished, or a function that wrote
    none)."""
    if trial.state()[0] != "finished":
        return None
    return next((summary for _, summary in run_summaries(trial.root, trial.kind == "function")), None)


def source_provenance(root: Path | None = None) -> dict[str, str]:
    """``CAPGEO_COMMIT`` and ``CAPGEO_TREE_CLEAN`` of the git checkout at ``root`` (default: the current folder), for
    trials that run on a copy without ``.git``; empty where there is no git checkout."""
    where = Path.cwd() if root is None else root
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, check=True,
                                timeout=30).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                                capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"CAPGEO_COMMIT": commit, "CAPGEO_TREE_CLEAN": "0" if status else "1"}


@contextlib.contextmanager
def output_to(path: Path) -> Iterator[None]:
    """Send this process's stdout and stderr (file descriptors 1 and 2, so Lightning's and torch's output too) to
    ``path``, appended, while the block runs."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "a") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


class TrialFailed(RuntimeError):
    """A trial's run ended with an error; the message names the trial and its log."""


def run_trial(trial: TrialLike, threads: int | None = None, callbacks: Sequence[Any] = (),
              env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run (or resume, or skip) one trial in this process: the trial function of every engine.

    The thread count is pinned (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and torch's own) before the run starts and
    recorded (a command: in its summary, if it records it; a function: in its trial record); the run's output goes to
    ``LOGDIR/NAME/run.log``. A capability stopper among ``callbacks`` that ends the run records why in its summary
    (``stopped``), which makes the run finished.

    Args:
        trial: the trial.
        threads: its thread count (default: ``trial.cpus``, at least 1).
        callbacks: extra Lightning callbacks for a command trial (e.g. a capability stopper, a Tune reporter).
        env: environment to set first (e.g. ``CAPGEO_COMMIT`` for a copy without git).

    Returns:
        ``{"name", "action", "state_before", "reason", "summary"}``; action is ``skipped``, ``done`` or ``resumed``.

    Raises:
        TrialFailed: when the trial's check fails or the run raises.
    """
    import torch

    state, reason = trial.state()
    if state == "finished":
        return {"name": trial.key, "action": "skipped", "state_before": state, "reason": reason, "summary": None}
    threads = threads or max(1, int(trial.cpus))
    os.environ.update({**(env or {}), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)})
    os.environ.setdefault("PYTHONHASHSEED", "0")
    torch.set_num_threads(threads)
    trial.root.mkdir(parents=True, exist_ok=True)
    log = trial.root / LOG_NAME
    resume = state == "resume"
    with open(log, "a") as handle:
        handle.write(f"\n$ OMP_NUM_THREADS={threads} {trial.describe(resume)}\n")
    try:
        with output_to(log):
            summary = trial.execute(resume, list(callbacks))
    except (Exception, SystemExit) as err:  # noqa: BLE001 - every failure is the trial's, named with its log
        raise TrialFailed(f"trial {trial.key} failed: {type(err).__name__}: {err} (log: {log})") from err
    return {"name": trial.key, "action": "resumed" if resume else "done", "state_before": state,
            "reason": reason, "summary": summary}
