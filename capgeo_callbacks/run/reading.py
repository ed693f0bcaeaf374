"""Reading runs
============

One home for finding runs on disk and their summaries, for every reader (the scorers, offline analysis,
``train.py --resume``, the sweep, the study's runner and reports).

A run is a folder. Lightning's loggers give it one ``version_<k>`` folder per start (``train.py``:
``LOGDIR/NAME/version_<k>/capgeo_summary.json``); the newest version (highest ``k``) is the run, and only
a version whose summary can be read counts as finished. A committed corpus packs each run's summary into one
gzipped file (``study/corpus/hard/sort-hard-xs-s0.json.gz``): that file is the run, named by its path without
``.json.gz``. The summary may also sit in the run folder itself (a user's own trainer). What capgeo cost a run is
read from its summary here too (:func:`capgeo_share`, :func:`overhead_line`).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capgeo_callbacks.run.budget import CLOCKS
from capgeo_callbacks.run.summary import SUMMARY_FILENAME, read_summary

__all__ = [
    "DIFFICULTY_ORDER",
    "RunRecord",
    "capgeo_share",
    "find_run_summary",
    "find_runs",
    "newest_summary",
    "overhead_line",
    "newest_version",
    "read_run",
    "read_version_summary",
    "version_number",
    "versions",
]

log = logging.getLogger("capgeo.runs")

PACKED_SUFFIX = ".json.gz"
# Display order of capgeo's difficulty names (any other name sorts after them, alphabetically).
DIFFICULTY_ORDER = {"easy": 0, "medium": 1, "hard": 2}
_VERSION = re.compile(r"version_(\d+)")
PARTS = ("whole_run", "after_start")  # the parts of the run an ``overhead`` record gives shares over


@dataclass(frozen=True)
class RunRecord:
    """One run's summary and where it was found.

    Attributes:
        name: the run (the folder above ``version_*``, or a packed file's path without ``.json.gz``), relative
            to the folder searched, with ``/`` separators.
        version: the ``version_*`` folder the summary is in, or None (in the run folder itself, or packed).
        path: the summary file.
        summary: its parsed contents.
    """

    name: str
    version: str | None
    path: Path
    summary: dict[str, Any]


# ------------------------------------------------------------------------------------------- versions


def version_number(folder: str | Path) -> int | None:
    """``k`` of a ``version_<k>`` folder, or None for any other name."""
    match = _VERSION.fullmatch(Path(folder).name)
    return int(match.group(1)) if match else None


def versions(run_root: str | Path) -> list[Path]:
    """The ``version_<k>`` folders of a run, newest (highest ``k``) first."""
    found = [(version_number(p), p) for p in Path(run_root).glob("version_*") if p.is_dir()]
    return [p for k, p in sorted(((k, p) for k, p in found if k is not None), reverse=True)]


def newest_version(run_root: str | Path) -> Path | None:
    """The run's newest ``version_<k>`` folder (the one ``train.py --resume`` continues), or None."""
    found = versions(run_root)
    return found[0] if found else None


def read_version_summary(version: str | Path) -> dict[str, Any] | None:
    """The summary in a version folder, or None if it is absent or unreadable (a run cut short)."""
    try:
        summary = read_summary(Path(version) / SUMMARY_FILENAME)
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def newest_summary(run_root: str | Path) -> dict[str, Any] | None:
    """The summary of the run's newest version that has a readable one (a finished run), or None."""
    return next((s for s in map(read_version_summary, versions(run_root)) if s is not None), None)


# ----------------------------------------------------------------------------------------------- runs


def read_run(path: str | Path, root: str | Path | None = None) -> RunRecord:
    """The run whose summary is ``path`` (``capgeo_summary.json``, its ``.gz``, or a packed ``<run>.json.gz``),
    named relative to ``root`` (default: the run folder's own name).

    Raises:
        OSError, ValueError: if the file cannot be read or is not a JSON object.
    """
    path = Path(path)
    packed = path.name.endswith(PACKED_SUFFIX) and not path.name.startswith(SUMMARY_FILENAME)
    version = None if packed else version_number(path.parent)
    run_root = path.with_name(path.name[:-len(PACKED_SUFFIX)]) if packed else (
        path.parent.parent if version is not None else path.parent)
    relative = run_root.name if root is None else run_root.relative_to(root).as_posix()
    summary = read_summary(path)
    if not isinstance(summary, dict):
        raise ValueError("not a summary (a JSON object was expected)")
    return RunRecord(run_root.name if relative == "." else relative,
                     path.parent.name if version is not None else None, path, summary)


def find_runs(runs_dir: str | Path) -> list[RunRecord]:
    """Every run under ``runs_dir`` (searched recursively), one record each, sorted for display (task,
    difficulty, parameters, seed, name).

    Read: ``capgeo_summary.json`` (or ``.json.gz``) in a ``version_*`` folder or a run folder, where the newest
    version with a readable summary wins; and packed ``*.json.gz`` files, each a run. A summary that cannot be
    read is skipped with a warning.

    Raises:
        FileNotFoundError: if ``runs_dir`` is not a folder.
    """
    root = Path(runs_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"runs folder {str(root)!r} does not exist or is not a folder")
    candidates: dict[str, list[tuple[int, Path]]] = {}
    for path in sorted({*root.rglob(SUMMARY_FILENAME), *root.rglob("*" + PACKED_SUFFIX)}):
        packed = not path.name.startswith(SUMMARY_FILENAME)
        number = version_number(path.parent)
        run_root = path.with_name(path.name[:-len(PACKED_SUFFIX)]) if packed else (
            path.parent.parent if number is not None else path.parent)
        candidates.setdefault(run_root.as_posix(), []).append((-1 if number is None else number, path))
    records = []
    for found in candidates.values():
        for _, path in sorted(found, key=lambda item: item[0], reverse=True):
            try:
                records.append(read_run(path, root))
                break
            except (OSError, ValueError) as err:
                log.warning("skipping %s: not a readable summary (%s)", path, err)
    return sorted(records, key=_display_key)


def _display_key(record: RunRecord) -> tuple[Any, ...]:
    s = record.summary
    difficulty = str(s.get("difficulty") or "")
    parameters = s.get("parameters")
    seed = s.get("seed")
    return (str(s.get("task") or ""), DIFFICULTY_ORDER.get(difficulty, len(DIFFICULTY_ORDER)), difficulty,
            parameters if isinstance(parameters, (int, float)) else math.inf,
            float(seed) if isinstance(seed, (int, float)) else math.inf, record.name)


def find_run_summary(checkpoint_path: str | Path) -> Path | None:
    """The run's ``capgeo_summary.json`` beside a checkpoint or one folder up (``version_k/checkpoints/``)."""
    checkpoint_path = Path(checkpoint_path)
    for folder in (checkpoint_path.parent, checkpoint_path.parent.parent):
        if (folder / SUMMARY_FILENAME).is_file():
            return folder / SUMMARY_FILENAME
    return None


# ------------------------------------------------------------------------------------------- what capgeo cost


def capgeo_share(summary: Mapping[str, Any], clock: str = "cpu", part: str = "whole_run") -> float | None:
    """capgeo's share of a run's own time from its summary's ``overhead`` record, on the ``"cpu"`` or ``"wall"``
    clock, over the ``"whole_run"`` or ``"after_start"`` (after the protected start). None: the run had no budget,
    or its record is of an earlier layout without that figure (whose ``share`` is the whole run's wall share)."""
    if clock not in CLOCKS or part not in PARTS:
        raise ValueError(f"clock must be one of {CLOCKS} and part one of {PARTS}, got {clock!r} and {part!r}")
    record = summary.get("overhead")
    if not isinstance(record, Mapping):
        return None
    shares = record.get("shares")
    if isinstance(shares, Mapping):
        value = (shares.get(part) or {}).get(clock)
    else:
        value = record.get("share") if (clock, part) == ("wall", "whole_run") else None
    return None if value is None else float(value)


def overhead_line(summary: Mapping[str, Any]) -> str:
    """What capgeo cost the run, in a line (empty without an ``overhead`` record): its share of the run's CPU and
    wall time over the whole run and after the protected start, the budget, and each thinned piece's evaluations kept
    of those it was due at."""
    record = summary.get("overhead")
    if not isinstance(record, Mapping):
        return ""

    def shares(clock: str) -> str:
        whole, after = capgeo_share(summary, clock), capgeo_share(summary, clock, "after_start")
        return ", ".join(f"{100 * value:.1f}% {where}" for where, value in (("over the whole run", whole),
                                                                         ("after the protected start", after))
                         if value is not None) or "not measured"

    budget = record.get("budget")
    setting = "measured only, nothing thinned" if budget is None else \
        f"budget {100 * budget:g}%, {'kept' if record.get('kept') else 'not kept'}"
    kept = ", ".join(f"{name} {counts.get('runs', 0)} of {counts['due']}"
                     for name, counts in (record.get("work") or {}).items() if counts.get("thinned"))
    return (f"capgeo's cost: CPU {shares('cpu')}; wall {shares('wall')} ({setting}"
            + (f"; thinned, evaluations kept of those due: {kept}" if kept else "") + ")")
