"""The held-out policy: a held-out run is reported only under a registration committed before it.

Each run records the registration's sha256 and its code commit (train.py ``--registration``); a held-out run (seed >=
``HELD_OUT_SEEDS``) counts only when its sha256 is the registration's and its commit already contains the
registration (:func:`held_out_check`), and the study hands the scorer only those (the scorer scores every run it is
given). The held-out test (:mod:`study.phases.heldout`) and the new task families (:mod:`study.phases.newtasks`)
hold their runs to it. A registration names its rules as they were named then: :func:`registered_rule` reads such a
name as the library's rule now, and its tables print it as registered with the name now beside it
(:func:`as_registered`: ``study (now rankme-recovery)``).
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from capgeo_callbacks.keys import rule_name
from capgeo_callbacks.rules import Rule, make_rule, rule_from_record
from capgeo_callbacks.rules.registration import file_sha256
from capgeo_callbacks.run.summary import read_summary
from capgeo_callbacks.scoring import ScoredRun
from study.checkout import ROOT
from study.phases.corpus import HELD_OUT_SEEDS

__all__ = ["as_registered", "committed", "held_out_check", "load_registered", "registered_before", "registered_rule",
           "sha256"]

sha256 = file_sha256  # what a run records of its registration


def as_registered(name: str) -> str:
    """A rule's name as a registration wrote it, with its name now beside it where it has changed since."""
    now = rule_name(name)
    return name if now == name else f"{name} (now {now})"


def registered_rule(name: str, record: Mapping[str, Any] | None = None) -> Rule:
    """The library's rule a registration names ``name``: as its ``record`` (class path and settings) freezes it, else
    the rule of that name; a former name read as the rule's now, without a warning; named as :func:`as_registered`
    prints it."""
    rule = rule_from_record(record) if record is not None else make_rule(rule_name(name))
    rule.name = as_registered(name)
    return rule


def registered_before(registration: Path, commit: str | None) -> bool:
    """Whether ``registration`` was committed in (an ancestor of) ``commit``, the code a run was made with. The
    commit that first added the file is found across renames (``git log --follow``), so a registration moved to
    another folder still binds the runs made before the move."""
    if not commit:
        return False
    root = registration.resolve().parent
    try:
        first = _first_added(root, registration.name, _git(root, "rev-parse", "HEAD"))
        return first is not None and _is_ancestor(root, first, commit)
    except (OSError, subprocess.SubprocessError):
        return False


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=30).stdout


# A page checks every run of a phase against the same registration: the history is read once per head, not per run
# (each ``git log --follow`` walks it all); whether one commit descends from another never changes.
@functools.cache
def _first_added(root: Path, name: str, head: str) -> str | None:
    found = _git(root, "log", "--follow", "--diff-filter=A", "--format=%H", "--", name).split()
    return found[-1] if found else None


@functools.cache
def _is_ancestor(root: Path, ancestor: str, commit: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", ancestor, commit], cwd=root, capture_output=True,
                          timeout=30).returncode == 0


def held_out_check(runs: Sequence[ScoredRun], registration: Path | None) -> tuple[list[ScoredRun], list[str]]:
    """The runs the study may report: every calibration-seed run, and held-out runs (seed >= ``HELD_OUT_SEEDS``)
    only when they carry ``registration``'s sha256 and were made with code that already held it. Returns (kept,
    why-dropped)."""
    digest = file_sha256(registration) if registration is not None else None
    kept, dropped = [], []
    for run in runs:
        if run.seed is None or run.seed < HELD_OUT_SEEDS:
            kept.append(run)
            continue
        recorded = (run.summary.get("registration") or {}).get("sha256")
        if digest is None:
            dropped.append(f"{run.name}: held-out seed, and no registration given")
        elif recorded != digest:
            dropped.append(f"{run.name}: made under registration {recorded}, not {digest}")
        elif not registered_before(registration, run.summary.get("commit")):  # type: ignore[arg-type]
            dropped.append(f"{run.name}: its commit {run.summary.get('commit')} does not contain the registration")
        else:
            kept.append(run)
    return kept, dropped


def committed(path: Path) -> bool:
    """Whether ``path`` is committed as it is (tracked, no uncommitted change)."""
    try:
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(path)], cwd=ROOT, capture_output=True,
                                 check=False).returncode == 0
        clean = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", str(path)], cwd=ROOT,
                               check=False).returncode == 0
    except OSError:
        return False
    return tracked and clean


def load_registered(folder: Path, registration: Path) -> list[dict[str, Any]]:
    """The exported summaries in ``folder`` made under ``registration`` as committed and after it was committed;
    any other refuses the whole set (a registered phase reports all of its runs or none)."""
    digest = sha256(registration)
    runs = []
    for file in sorted(folder.glob("*.json.gz")):
        summary = read_summary(file)
        if (summary.get("registration") or {}).get("sha256") != digest:
            raise SystemExit(f"{file.name} was not made under {registration.name} as committed (sha256 differs)")
        if not registered_before(registration, summary.get("commit")):
            raise SystemExit(f"{file.name} was made at {summary.get('commit')}, before the registration")
        runs.append(summary)
    return runs
