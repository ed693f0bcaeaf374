"""A trial: one run with a folder of its own, what its folder says about it, and the one function that runs it on
any engine.

Two kinds of trial: :class:`Trial`, a ``train.py`` run, and :class:`~launch.functions.FunctionTrial`, a call of a
user's training function (Ray Tune's function trainable, ``fn(config)``). A trial's folder is ``LOGDIR/NAME``.
train.py's has one ``version_*`` folder per start; a function writes under its folder as it likes (its logger's
folders, ``checkpoints/last.ckpt``) and the launcher keeps its record there (``capgeo_trial.json``). What the folder
holds decides what a launch does with it (:func:`run_state`, the one definition every caller uses):

- finished (skipped): the newest ``capgeo_summary.json`` (train.py: of the newest ``version_*`` that has one; a
  function: the newest written anywhere under its folder) whose ``steps`` reached the run's stop step (train.py's
  ``--stop-at-step``, else ``--max-steps``; a function's: the ``stop_at_step`` or ``max_steps`` its summary
  records); or, for a run with ``--stop-when-learned``, whose accuracy held 0.9 (``labels.full_step``); or that a
  capability stopper ended (``stopped``); or, for a function, once the function has returned (its record says so);
- resumable: otherwise, when there is a ``checkpoints/last.ckpt`` (train.py: in the newest ``version_*``, and
  ``--resume`` continues in that folder; a function: in its folder, passed as ``config["resume_from"]``);
- fresh: anything else.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from capgeo_callbacks.run.reading import read_version_summary, versions
from capgeo_callbacks.run.summary import SUMMARY_FILENAME

ROOT = Path(__file__).resolve().parents[1]
LOG_NAME = "run.log"  # each trial's train.py output, beside its version_* folders
# train.py flags a trial sets from its name and folder; in its arguments they would break naming or resuming
RESERVED_FLAGS = ("--logdir", "--name", "--resume")

LAST_CHECKPOINT = Path("checkpoints") / "last.ckpt"  # under a train.py version folder, or a function's trial folder
TRIAL_RECORD = "capgeo_trial.json"  # the launcher's record of a function trial, in its folder

State = Literal["finished", "resume", "fresh"]
Kind = Literal["train.py", "function"]


class TrialLike(Protocol):
    """What the engines need of a trial (:class:`Trial`, :class:`~launch.functions.FunctionTrial`)."""

    name: str
    logdir: Path
    tags: Mapping[str, Any]
    cpus: float
    gpus: float
    kind: ClassVar[Kind]  # train.py's run (takes extra Lightning callbacks) or a function's (builds its own Trainer)

    @property
    def root(self) -> Path: ...

    @property
    def key(self) -> str: ...

    def check(self) -> None:
        """Raise a ValueError naming the problem when the trial cannot run (before any trial starts)."""

    def state(self) -> tuple[State, str]: ...

    def describe(self, resume: bool) -> str:
        """The trial's command, for its log."""

    def execute(self, resume: bool, callbacks: list[Any]) -> Mapping[str, Any] | None:
        """Run it in this process (threads already pinned, output already sent to its log); its summary."""


class TrialFolder:
    """A trial's folder: ``logdir / name``, and how reports name it."""

    name: str
    logdir: Path

    @property
    def root(self) -> Path:
        return self.logdir / self.name

    @property
    def key(self) -> str:
        """How reports name the trial: ``folder/name`` (names may repeat across folders)."""
        return f"{self.logdir.name}/{self.name}"


def check_resources(name: str, cpus: float, gpus: float) -> None:
    if cpus <= 0 or gpus < 0:
        raise ValueError(f"trial {name}: cpus must be > 0 and gpus >= 0, got {cpus}, {gpus}")


@dataclass(frozen=True)
class Trial(TrialFolder):
    """One train.py run of a sweep or a study phase.

    Attributes:
        name: the run folder's name under ``logdir`` (unique within it).
        argv: train.py arguments, without ``--logdir``, ``--name`` or ``--resume``.
        logdir: the folder the run folder is in.
        tags: what the caller wants to remember about it (phase, variant, seed...).
        cpus: CPU cores the trial holds (also its thread count).
        gpus: the share of a GPU it holds (0.25: four trials share one GPU).
    """

    name: str
    argv: tuple[str, ...]
    logdir: Path
    tags: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    cpus: float = 1.0
    gpus: float = 0.0
    kind: ClassVar[Kind] = "train.py"

    def __post_init__(self) -> None:
        object.__setattr__(self, "logdir", Path(self.logdir).absolute())  # engines run trials from other folders
        given = [a for a in self.argv if a.split("=")[0] in RESERVED_FLAGS]
        if given:
            raise ValueError(f"trial {self.name}: train.py arguments must not set {', '.join(given)} "
                             f"(the trial sets them from its name and folder)")
        check_resources(self.name, self.cpus, self.gpus)

    @cached_property
    def args(self) -> argparse.Namespace:
        """train.py's parsed arguments (its defaults filled in); a ValueError with train.py's message if it
        rejects them."""
        return train_args(self.command())

    def command(self, resume: bool = False) -> list[str]:
        """The train.py arguments of this trial."""
        return [*self.argv, "--logdir", str(self.logdir), "--name", self.name, "--no-progress",
                *(["--resume"] if resume else [])]

    def check(self) -> None:
        self.args  # noqa: B018 - train.py's own check of the arguments

    def state(self) -> tuple[State, str]:
        return run_state(self.root, self.args.stop_at_step, self.args.stop_when_learned)

    def describe(self, resume: bool) -> str:
        return f"train.py {' '.join(self.command(resume))}"

    def execute(self, resume: bool, callbacks: list[Any]) -> Mapping[str, Any] | None:
        import torch

        import train

        torch.set_float32_matmul_precision("high")
        train.quiet_lightning()
        return train.main(self.command(resume=resume), callbacks=callbacks)


def train_args(argv: Sequence[str]) -> argparse.Namespace:
    """train.py's parsed arguments (``train_cli.parse_args``, its command line, not train.py itself), with its argparse
    error turned into a ValueError carrying the message."""
    import train_cli

    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):  # train.py's usage line would name the launcher: keep the message
            return train_cli.parse_args(argv)
    except SystemExit as err:
        message = captured.getvalue().strip().splitlines()[-1:] or ["invalid arguments"]
        raise ValueError(f"train.py rejected {' '.join(argv)}: {message[0].split('error: ', 1)[-1]}") from err


def run_state(run_root: Path, stop_at_step: int | None = None, stop_when_learned: bool = False,
              function: bool = False) -> tuple[State, str]:
    """Whether a run folder holds a finished run, a resumable one, or nothing usable (module docstring).

    Args:
        run_root: the trial's folder (train.py's ``LOGDIR/NAME``; a function's ``config["trial_dir"]``).
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
    train.py's, one per ``version_*`` (highest first); a function's, every ``capgeo_summary.json`` under the folder
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


def source_provenance(root: Path = ROOT) -> dict[str, str]:
    """``CAPGEO_COMMIT`` and ``CAPGEO_TREE_CLEAN`` of the launching checkout, for trials that run on a copy without
    ``.git`` (train.provenance reads them there); empty where this checkout has no git."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True,
                                timeout=30).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"CAPGEO_COMMIT": commit, "CAPGEO_TREE_CLEAN": "0" if status else "1"}


def require_clean_tree(what: str, root: Path = ROOT) -> str:
    """The commit of ``root``, or exit when its tracked files have uncommitted changes: a registered or calibration
    run must name the code it ran."""
    found = source_provenance(root)
    if not found:
        raise SystemExit(f"{what} needs a git checkout to record its commit ({root} has none)")
    if found["CAPGEO_TREE_CLEAN"] != "1":
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, check=False, timeout=30).stdout.strip()
        raise SystemExit(f"{what} refuses a tree with uncommitted changes (commit them, or run from a clean "
                         f"worktree):\n{status}")
    return found["CAPGEO_COMMIT"]


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
    """A trial's train.py run ended with an error; the message names the trial and its log."""


def run_trial(trial: TrialLike, threads: int | None = None, callbacks: Sequence[Any] = (),
              env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run (or resume, or skip) one trial in this process: the trial function of every engine.

    The thread count is pinned (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and torch's own) before the run starts and
    recorded (train.py: in its summary; a function: in its trial record); the run's output goes to
    ``LOGDIR/NAME/run.log``. A capability stopper among ``callbacks`` that ends the run records why in its summary
    (``stopped``), which makes the run finished.

    Args:
        trial: the trial.
        threads: its thread count (default: ``trial.cpus``, at least 1).
        callbacks: extra Lightning callbacks for a train.py run (e.g. a capability stopper, a Tune reporter).
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
