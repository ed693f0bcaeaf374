"""A registration: the warning and the forecaster a study chose and froze before testing them, kept as data.

A registration file is JSON holding, beside whatever else its study records (the runs it was chosen on, the
comparators, the held-out plan), a ``warning`` and a ``forecaster``, each a rule record
(:func:`~capgeo_callbacks.rules.rule_record`: name, class path, settings). :func:`rules_from_registration` is the one
loader: the rules it freezes, and what a run's summary records of it (where it was, its sha256, the rules' names), so
that a run names the registration it ran under.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from capgeo_callbacks.rules.base import Rule, rule_from_record

__all__ = ["ROLES", "file_sha256", "rules_from_registration"]

ROLES = ("warning", "forecaster")  # the rules a registration freezes, in the order a run runs them


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes (what a run records of the registration it ran under)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def rules_from_registration(path: str | Path, relative_to: str | Path | None = None
                            ) -> tuple[list[Rule], dict[str, Any]]:
    """The rules a registration file freezes (its warning, then its forecaster unless it is the same rule), and what a
    summary records of it: its ``path`` (relative to ``relative_to`` where it lies inside it, else its file name: a
    summary names no folder of the machine it ran on), ``sha256`` and the ``warning`` and ``forecaster`` names.

    Raises:
        OSError: if the file cannot be read.
        ValueError: if it is not JSON, or a rule record names no rule.
        KeyError: if it lacks a warning or a forecaster.
    """
    path = Path(path)
    registration = json.loads(path.read_bytes())
    rules: list[Rule] = []
    for role in ROLES:
        rule = rule_from_record(registration[role])
        if all(rule.name != other.name for other in rules):
            rules.append(rule)
    resolved = path.resolve()
    root = None if relative_to is None else Path(relative_to).resolve()
    shown = str(resolved.relative_to(root)) if root is not None and resolved.is_relative_to(root) else resolved.name
    return rules, {"path": shown, "sha256": file_sha256(path), **{role: registration[role]["name"] for role in ROLES}}
