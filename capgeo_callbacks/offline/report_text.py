"""The printed report of an offline analysis: the per-revision RankMe table, then the verdict table."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from capgeo_callbacks.keys import RANKME
from capgeo_callbacks.publish.text import verdict_table

__all__ = ["format_report"]


def format_report(summary: Mapping[str, Any]) -> str:
    """The per-revision RankMe table, skipped and duplicate revisions, then the verdict and per-layer
    collapse table (:func:`~capgeo_callbacks.publish.text.verdict_table`), as plain text."""
    analysis = summary.get("analysis", {})
    labels: list[str] = list(analysis.get("layers", []))
    probe = analysis.get("probe_set", {})
    kwargs = probe.get("kwargs", {})
    where = probe.get("path") or f"{kwargs.get('task')}/{kwargs.get('difficulty')} {probe.get('split')} set"
    rows = sorted({n for tag, n in summary.get("rows", {}).items() if tag.startswith(RANKME)})
    lines = [f"offline analysis of {len(summary.get('revisions', []))} {analysis.get('model_kind')} revision(s); "
             f"probe set: {where}; selector {analysis.get('selector')}; rows per layer: "
             f"{', '.join(map(str, rows)) or 'none'} (num_rows {analysis.get('num_rows')})"]
    if analysis.get("layer_note"):
        lines.append(f"note: {analysis['layer_note']}")
    widths = [max(9, len(label) + 2) for label in labels]
    header = f"{'step':>8}  {'revision':<18}{'acc':>8}" + "".join(
        f"{label:>{w}}" for label, w in zip(labels, widths, strict=True)) + "  weights"
    lines += ["", "RankMe per layer", header, "-" * len(header)]
    for entry in summary.get("revisions", []):
        values = entry.get("rankme", {})
        cells = "".join(f"{_cell(values.get(label)):>{w}}" for label, w in zip(labels, widths, strict=True))
        duplicate = entry.get("duplicate_of")
        note = f"= {duplicate} (identical weights)" if duplicate else entry["weights_sha256"][:12]
        lines.append(f"{entry['step']:>8}  {entry['name'][:17]:<18}{_cell(entry.get('acc')):>8}{cells}  {note}")
    for skip in summary.get("skipped_revisions", []):
        lines.append(f"skipped {skip['name']} (step {skip['step']}): {skip['reason']}")
    for group in summary.get("duplicate_weights", []):
        lines.append(f"WARNING identical weights: {', '.join(group['revisions'])} (steps "
                     f"{', '.join(map(str, group['steps']))}); a flat stretch there is not geometry")
    lines += ["", f"accuracy: {summary.get('monitor')}", verdict_table(summary)]
    return "\n".join(lines)


def _cell(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)
