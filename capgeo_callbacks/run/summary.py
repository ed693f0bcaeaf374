"""Run summary
===========

The one home of ``capgeo_summary.json``: its schema, its file name, building it from plain series, the
alert message and the verdict table. The live :class:`~capgeo_callbacks.PrecursorDetector`, offline
analysis of checkpoints and the Hugging Face callback all call :func:`build_summary`, so a summary written
live and one written offline from the same series are equal key for key. Schema: docs/design.md, "Summary".
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

__all__ = [
    "COMPUTED_KEYS",
    "OFFLINE_SUMMARY_FILENAME",
    "SUMMARY_FILENAME",
    "alert_message",
    "build_summary",
    "json_safe",
    "layer_names",
    "read_summary",
    "run_info_of",
    "verdict_table",
    "write_summary",
]

SUMMARY_FILENAME = "capgeo_summary.json"
OFFLINE_SUMMARY_FILENAME = "capgeo_offline_summary.json"
# the keys build_summary computes; every other key of a summary is the run info it was given
COMPUTED_KEYS = ("steps", "monitor", "rows", "selectors", "settings", "acquisition_step", "labels", "verdict", "gap",
                 "verdict_layer", "layers", "layer_order_rho", "logprob_emergence_step", "acc_at_logprob_emergence",
                 "measures", "alerts", "series")


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
    rankme_prefix: str = "rankme/",
    logprob_key: str | None = None,
    logprob: Points | None = None,
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
        series: every measured series by tag; tags starting with ``rankme_prefix`` are the RankMe layers,
            in depth order.
        settings: the detection settings.
        alerts: the alerts raised (live) or replayed (offline), in order.
        monitor: the accuracy key the run monitored.
        rankme_prefix: tag prefix of the RankMe series.
        logprob_key: the log-prob key (``val/logprob``), stored in ``series`` under that name.
        logprob: its ``[[step, value], ...]``.
        token_acc_key: the per-token accuracy key (``val/token_acc``) in ``series``, for the chance label.
        run_info: fields describing the run (task, difficulty, size, seed, ...), stored first; where it holds
            ``warmup_steps`` and ``max_steps`` the labels say whether acquisition was late, and where it holds
            ``chance`` (a :class:`~capgeo_callbacks.detection.Chance` as a dict) whether the run stayed at chance.
        steps: training steps taken (default: the last evaluation step).
        parameters: parameter count.
        rows: rows each tag was measured on (RankMe is only comparable at equal N).
        selectors: token selector of each measure prefix (``{"rankme": "answer"}``).
    """
    rankme = {tag[len(rankme_prefix):]: points for tag, points in series.items() if tag.startswith(rankme_prefix)}
    info = dict(run_info or {})
    chance = Chance.from_dict(info["chance"]) if info.get("chance") else None
    detected = detect_run(acc, rankme, settings, logprob=logprob, measures=series,
                          token_acc=series.get(token_acc_key) if token_acc_key else None,
                          warmup_steps=info.get("warmup_steps"), max_steps=info.get("max_steps"), chance=chance)
    all_series: dict[str, list[list[float]]] = {"acc": _points(acc)}
    all_series.update({tag: _points(points) for tag, points in series.items()})
    if logprob_key is not None and logprob:
        all_series[logprob_key] = _points(logprob)
    return {
        **info,
        "parameters": info.get("parameters", parameters),
        "steps": steps if steps is not None else (int(acc[-1][0]) if acc else 0),
        "monitor": monitor,
        "rows": dict(rows or {}),
        "selectors": dict(selectors or {}),
        **detected,
        "alerts": [{"message": alert_message(alert, monitor), **asdict(alert)} for alert in alerts],
        "series": all_series,
    }


def layer_names(summary: Mapping[str, Any]) -> list[str]:
    """The watched layers in watch order (shallowest first: the detector's depth order), from the summary."""
    names = list(summary.get("layers", {}) or {})
    for tag in summary.get("series", {}) or {}:
        if tag.startswith("rankme/") and tag[len("rankme/"):] not in names:
            names.append(tag[len("rankme/"):])
    return names


def alert_message(alert: Alert, monitor: str = "val/acc") -> str:
    """The one-line text of an alert (logging warning, logger text, summary)."""
    if alert.collapse_step is None:  # a rule that reads no geometry
        return f"capgeo {alert.rule} alert at step {alert.step}: {alert.evidence}"
    where = f"the run (first layer: {alert.layer})" if alert.kind == "run" else f"layer {alert.layer}"
    evidence = ""
    if alert.drop_noise_units is not None and alert.peak is not None and math.isfinite(alert.peak):
        evidence = (f"; drop {alert.peak:.2f} -> {alert.trough:.2f}, {alert.drop_noise_units:.1f} noise units, "
                    f"{alert.step - alert.collapse_step} steps since the trough")
    if alert.kind == "run" and len(alert.layers) > 1:
        evidence += f"; layers {', '.join(alert.layers)}"
    return (f"capgeo precursor alert at step {alert.step}: RankMe of {where} collapsed at step "
            f"{alert.collapse_step} (floor {alert.floor:.2f}) and recovered by step {alert.recovery_step}, "
            f"while {monitor} is still below the acquisition threshold{evidence}")


def verdict_table(summary: Mapping[str, Any], markdown: bool = False) -> str:
    """The verdict and the per-layer collapse table, as plain text or Markdown."""
    headline = (f"verdict: {summary.get('verdict')}   gap: {_cell(summary.get('gap'))} steps   "
                f"acquisition step: {_cell(summary.get('acquisition_step'))}   log-prob emergence step: "
                f"{_cell(summary.get('logprob_emergence_step'))}   layer-order rho: "
                f"{_cell(summary.get('layer_order_rho'))}")
    header = ("layer", "collapse step", "floor", "recovery step", "verdict", "gap")
    rows = [(name, _cell(info.get("collapse_step")), _cell(info.get("floor")), _cell(info.get("recovery_step")),
             str(info.get("verdict")), _cell(info.get("gap")))
            for name, info in summary.get("layers", {}).items()]
    if markdown:
        lines = [f"**{headline}**", "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    return "\n".join([headline, *_aligned(header, rows)])


def first_warnings(summary: Mapping[str, Any]) -> dict[str, int]:
    """Each rule's first run-level alert step, in the order the rules first warned."""
    first: dict[str, int] = {}
    for alert in summary.get("alerts") or []:
        if alert.get("kind") == "run":
            first.setdefault(alert.get("rule") or "study", int(alert["step"]))
    return first


def rules_table(summary: Mapping[str, Any]) -> str:
    """Each rule the run ran: its first run-level alert (and its lead over the acquisition step) and, for a
    forecaster, its last forecast of the acquisition step made before it (after it, a forecast is the step
    itself), with the interval; plain text."""
    acquisition = summary.get("acquisition_step")
    first = first_warnings(summary)
    forecasts = summary.get("forecasts", {}) or {}
    header = ("rule", "first warning", "lead", "last forecast before acquisition [interval]")
    rows = []
    for name in summary.get("rules", {}) or {}:
        step = first.get(name)
        lead = "-" if step is None or acquisition is None else str(int(acquisition) - step)
        made = [f for f in forecasts.get(name) or [] if acquisition is None or f["step"] < acquisition]
        last = made[-1] if made else None
        if last is None:
            forecast = "-"
        elif last.get("beyond"):
            forecast = "not within the budget"
        else:
            forecast = f"{last['predicted']:.0f} [{last['low']:.0f}, {last['high']:.0f}] at step {last['step']}"
        rows.append((name, _cell(step), lead, forecast))
    if not rows:
        return ""
    header_line, rule, *body = _aligned(header, rows)
    return "\n".join([header_line, rule, *(line.rstrip() for line in body)])


def _aligned(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A plain-text table: the header, a rule under it, then the rows, columns left-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("-" * len(lines[-1]))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return lines


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


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)
