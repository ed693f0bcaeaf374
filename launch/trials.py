"""A trial: one ``train.py`` run with a folder of its own, what its folder says about it, and the one function that
runs it on any engine.

A trial's folder is ``LOGDIR/NAME`` (train.py's ``--logdir`` and ``--name``), with one ``version_*`` folder per
start. What the folder holds decides what a launch does with it (:func:`run_state`, the one definition every
caller uses):

- finished (skipped): the newest ``version_*`` with a ``capgeo_summary.json`` whose ``steps`` reached the run's
  stop step (``--stop-at-step``, else ``--max-steps``); or, for a run with ``--stop-when-learned``, whose accuracy
  held 0.9 (``labels.full_step``); or that a capability stopper ended (``stopped``, written by the launcher);
- resumable: otherwise, when the newest ``version_*`` has ``checkpoints/last.ckpt``: run again with ``--resume``,
  which continues in that folder;
- fresh: anything else: a new ``version_*``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from capgeo_callbacks.run.reading import read_version_summary, versions

ROOT = Path(__file__).resolve().parents[1]
LOG_NAME = "run.log"  # each trial's train.py output, beside its version_* folders
# train.py flags a trial sets from its name and folder; in its arguments they would break naming or resuming
RESERVED_FLAGS = ("--logdir", "--name", "--resume")

State = Literal["finished", "resume", "fresh"]


@dataclass(frozen=True)
class Trial:
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "logdir", Path(self.logdir).absolute())  # engines run trials from other folders
        given = [a for a in self.argv if a.split("=")[0] in RESERVED_FLAGS]
        if given:
            raise ValueError(f"trial {self.name}: train.py arguments must not set {', '.join(given)} "
                             f"(the trial sets them from its name and folder)")
        if self.cpus <= 0 or self.gpus < 0:
            raise ValueError(f"trial {self.name}: cpus must be > 0 and gpus >= 0, got {self.cpus}, {self.gpus}")

    @property
    def root(self) -> Path:
        return self.logdir / self.name

    @property
    def key(self) -> str:
        """How reports name the trial: ``folder/name`` (names may repeat across folders)."""
        return f"{self.logdir.name}/{self.name}"

    @cached_property
    def args(self) -> argparse.Namespace:
        """train.py's parsed arguments (its defaults filled in); a ValueError with train.py's message if it
        rejects them."""
        return train_args(self.command())

    def command(self, resume: bool = False) -> list[str]:
        """The train.py arguments of this trial."""
        return [*self.argv, "--logdir", str(self.logdir), "--name", self.name, "--no-progress",
                *(["--resume"] if resume else [])]

    def state(self) -> tuple[State, str]:
        return run_state(self.root, self.args.stop_at_step, self.args.stop_when_learned)


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


def run_state(run_root: Path, stop_at_step: int, stop_when_learned: bool = False) -> tuple[State, str]:
    """Whether a run folder holds a finished run, a resumable one, or nothing usable (module docstring).

    Args:
        run_root: ``LOGDIR/NAME``.
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
        if summary.get("stopped"):
            return "finished", f"{version.name}: stopped at step {steps} ({summary['stopped'].get('reason')})"
        break
    if found and (found[0] / "checkpoints" / "last.ckpt").is_file():
        return "resume", f"{found[0].name}/checkpoints/last.ckpt"
    return "fresh", "no checkpoint" if found else "new run"


def summary_of(trial: Trial) -> dict[str, Any] | None:
    """The summary of a finished trial (:func:`run_state`), or None."""
    if trial.state()[0] != "finished":
        return None
    for version in versions(trial.root):
        summary = read_version_summary(version)
        if summary is not None:
            return summary
    return None


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


def run_trial(trial: Trial, threads: int | None = None, callbacks: Sequence[Any] = (),
              env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run (or resume, or skip) one trial in this process: the trial function of every engine.

    The thread count is pinned (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and torch's own) before train.py runs and
    recorded in its summary; train.py's output goes to ``LOGDIR/NAME/run.log``. A capability stopper among
    ``callbacks`` that ends the run records why in its summary (``stopped``), which makes the run finished.

    Args:
        trial: the trial.
        threads: its thread count (default: ``trial.cpus``, at least 1).
        callbacks: extra Lightning callbacks for the run (e.g. a capability stopper, a Tune reporter).
        env: environment to set first (e.g. ``CAPGEO_COMMIT`` for a copy without git).

    Returns:
        ``{"name", "action", "state_before", "reason", "summary"}``; action is ``skipped``, ``done`` or ``resumed``.

    Raises:
        TrialFailed: when train.py rejects its arguments or the run raises.
    """
    import torch

    import train

    state, reason = trial.state()
    if state == "finished":
        return {"name": trial.key, "action": "skipped", "state_before": state, "reason": reason, "summary": None}
    threads = threads or max(1, int(trial.cpus))
    os.environ.update({**(env or {}), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)})
    os.environ.setdefault("PYTHONHASHSEED", "0")
    torch.set_num_threads(threads)
    torch.set_float32_matmul_precision("high")
    train.quiet_lightning()
    trial.root.mkdir(parents=True, exist_ok=True)
    log = trial.root / LOG_NAME
    command = trial.command(resume=state == "resume")
    with open(log, "a") as handle:
        handle.write(f"\n$ OMP_NUM_THREADS={threads} train.py {' '.join(command)}\n")
    try:
        with output_to(log):
            summary = train.main(command, callbacks=list(callbacks))
    except (Exception, SystemExit) as err:  # noqa: BLE001 - every failure is the trial's, named with its log
        raise TrialFailed(f"trial {trial.key} failed: {type(err).__name__}: {err} (log: {log})") from err
    return {"name": trial.key, "action": "resumed" if state == "resume" else "done", "state_before": state,
            "reason": reason, "summary": summary}
