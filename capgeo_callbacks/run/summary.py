"""Run summary
===========

The one home of ``capgeo_summary.json``: its schema, its file name, building it from plain series, writing and
reading it. The run session (:class:`~capgeo_callbacks.run.session.RunSession`, behind the Lightning and Hugging
Face callbacks and offline analysis) builds every summary with :func:`build_summary`, so a summary written live and
one written offline from the same series are equal key for key. Schema: docs/design.md, "Summary".
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from capgeo_callbacks.detection import Alert, Chance, DetectionSettings, Points, detect_run
from capgeo_callbacks.keys import ACC, RANKME, by_layer

__all__ = [
    "COMPUTED_KEYS",
    "OFFLINE_SUMMARY_FILENAME",
    "SUMMARY_FILENAME",
    "build_summary",
    "json_safe",
    "read_summary",
    "run_info_of",
    "write_summary",
]

SUMMARY_FILENAME = "capgeo_summary.json"
OFFLINE_SUMMARY_FILENAME = "capgeo_offline_summary.json"
# the keys build_summary computes; every other key of a summary is the run info it was given
COMPUTED_KEYS = ("steps", "monitor", "rows", "selectors", "settings", "acquisition_step", "labels", "verdict", "gap",
                 "verdict_layer", "layers", "layer_order_rho", "logprob_emergence_step", "acc_at_logprob_emergence",
                 "measures", "alerts", "rules", "rules_left_out", "measures_left_out", "forecasts",
                 "series")


def run_info_of(summary: Mapping[str, Any], exclude: Sequence[str] = ()) -> dict[str, Any]:
    """The run-info fields of a summary (``parameters`` included): every key :func:`build_summary` does not
    compute, nor any key in ``exclude``."""
    return {key: value for key, value in summary.items() if key not in COMPUTED_KEYS and key not in exclude}


def build_summary(
    *,
    acc: Points,
    series: Mapping[str, Points],
    settings: DetectionSettings,
    alerts: Sequence[Alert] = (),
    monitor: str = "val/acc",
    rankme_prefix: str = RANKME,
    logprob_key: str | None = None,
    token_acc_key: str | None = None,
    run_info: Mapping[str, Any] | None = None,
    steps: int | None = None,
    parameters: int | None = None,
    rows: Mapping[str, int] | None = None,
    selectors: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The run summary, from plain series.

    Args:
        acc: ``[[step, accuracy], ...]`` at every evaluation (the run's evaluation steps).
        series: every other recorded series by tag; tags starting with ``rankme_prefix`` are the RankMe layers,
            in depth order.
        settings: the detection settings.
        alerts: the alerts raised (live) or replayed (offline), in order.
        monitor: the accuracy key the run monitored.
        rankme_prefix: tag prefix of the RankMe series.
        logprob_key: the answer log-prob's tag in ``series`` (``val/logprob``), for log-prob emergence.
        token_acc_key: the per-token accuracy key (``val/token_acc``) in ``series``, for the chance label.
        run_info: fields describing the run (task, difficulty, size, seed, ...), stored first; where it holds
            ``warmup_steps`` and ``max_steps`` the labels say whether acquisition was late, and where it holds
            ``chance`` (a :class:`~capgeo_callbacks.detection.Chance` as a dict) whether the run stayed at chance.
        steps: training steps taken (default: the last evaluation step).
        parameters: parameter count.
        rows: rows each tag was measured on (RankMe is only comparable at equal N).
        selectors: token selector of each measure prefix (``{"rankme": "answer"}``).
    """
    info = dict(run_info or {})
    chance = Chance.from_dict(info["chance"]) if info.get("chance") else None
    detected = detect_run(acc, by_layer(series, rankme_prefix), settings,
                          logprob=series.get(logprob_key) if logprob_key else None, measures=series,
                          token_acc=series.get(token_acc_key) if token_acc_key else None,
                          warmup_steps=info.get("warmup_steps"), max_steps=info.get("max_steps"), chance=chance)
    all_series: dict[str, list[list[float]]] = {ACC: _points(acc)}
    all_series.update({tag: _points(points) for tag, points in series.items()})
    return {
        **info,
        "parameters": info.get("parameters", parameters),
        "steps": steps if steps is not None else (int(acc[-1][0]) if acc else 0),
        "monitor": monitor,
        "rows": dict(rows or {}),
        "selectors": dict(selectors or {}),
        **detected,
        "alerts": [{"message": alert.message(monitor), **asdict(alert)} for alert in alerts],
        "series": all_series,
    }


def write_summary(summary: Mapping[str, Any], directory: str | Path, filename: str = SUMMARY_FILENAME) -> Path:
    """Write ``summary`` as JSON (NaN and Inf as null) into ``directory``; returns the path."""
    path = Path(directory) / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(json_safe(summary), indent=1, allow_nan=False))
    return path


def read_summary(path: str | Path) -> dict[str, Any]:
    """A summary written by :func:`write_summary` (a folder means its ``capgeo_summary.json``); a ``.gz``
    file (how a corpus of runs is committed) is read through gzip."""
    path = Path(path)
    if path.is_dir():
        path = path / SUMMARY_FILENAME
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as handle:
            return json.load(handle)
    return json.loads(path.read_text())


def json_safe(value: Any) -> Any:
    """``value`` with NaN/Inf as None, tuples as lists, numpy and torch scalars as Python numbers."""
    if isinstance(value, Mapping):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _points(points: Points) -> list[list[float]]:
    return [[int(p[0]), float(p[1])] for p in points]
