"""Plain-text and Markdown tables of a run summary: the verdict and per-layer collapse table, and each rule's first
warning and last forecast (what ``train.py`` prints, the verdict text entry, the offline report)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from capgeo_callbacks.keys import RANKME_RECOVERY, rule_name

__all__ = ["first_warnings", "markdown_row", "rules_table", "verdict_table"]


def markdown_row(cells: Sequence[str]) -> str:
    """One row of a Markdown table (``["---"] * n``: the line under its head)."""
    return "| " + " | ".join(cells) + " |"


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
        lines = [f"**{headline}**", "", markdown_row(header), markdown_row(["---"] * len(header))]
        lines += [markdown_row(row) for row in rows]
        return "\n".join(lines)
    return "\n".join([headline, *_aligned(header, rows)])


def first_warnings(summary: Mapping[str, Any]) -> dict[str, int]:
    """Each rule's first run-level alert step, in the order the rules first warned."""
    first: dict[str, int] = {}
    for alert in summary.get("alerts") or []:
        if alert.get("kind") == "run":
            first.setdefault(rule_name(alert.get("rule") or RANKME_RECOVERY), int(alert["step"]))
    return first


def rules_table(summary: Mapping[str, Any]) -> str:
    """Each rule the run ran: its first run-level alert (and its lead over the acquisition step) and, for a
    forecaster, its last forecast of the acquisition step made before it (after it, a forecast is the step
    itself), with the interval; plain text. Each rule by its name now (a former name, in an older summary, read as
    the rule's name now)."""
    acquisition = summary.get("acquisition_step")
    first = first_warnings(summary)
    forecasts = summary.get("forecasts", {}) or {}
    header = ("rule", "first warning", "lead", "last forecast before acquisition [interval]")
    rows = []
    for recorded in summary.get("rules", {}) or {}:
        name = rule_name(recorded)
        step = first.get(name)
        lead = "-" if step is None or acquisition is None else str(int(acquisition) - step)
        made = [f for f in forecasts.get(recorded) or [] if acquisition is None or f["step"] < acquisition]
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


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)
