"""The TensorBoard custom-scalars layout (figures: :mod:`capgeo_callbacks.publish.figures`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from capgeo_callbacks.keys import FORECAST, RANKME

EARLY_PREFIX = "rankme_early/"  # RankMe over the first part of the budget only: its own chart, zoomed on it
FLOOR_PREFIX = "rankme_floor/"  # the lowest RankMe so far, over the same part: the floor as a plateau
ALERTS_TAG = "capgeo/alerts_raised"  # how many run alerts have been raised, at each evaluation
OVERHEAD_TAG = "capgeo/overhead_share"  # capgeo's share of the run's time so far: the progress bar's figure


def custom_scalars_layout(
    rankme_tags: Sequence[str], acc_tag: str, logprob_tag: str | None = None,
    other_tags: Sequence[str] = (), early_share: float | None = None, loss_tag: str | None = None,
    overhead: bool = False,
) -> dict[str, dict[str, list]]:
    """A custom-scalars layout that reads at TensorBoard's default settings.

    The first category opens with accuracy, the forecast of the acquisition step and the alerts raised; then,
    deepest layer first, each layer's RankMe over the early part of the budget (``rankme_early/``, logged only
    there, so the chart's step axis spans the collapse instead of squeezing it into the first pixels) with its
    lowest value so far (``rankme_floor/``: a plateau, which "ignore outliers" never clips, where a one-point
    trough would be); then all layers over the whole run, and the answer's log-prob and the validation loss in one
    chart (a user's model often logs only the loss: the chart shows whichever was logged). With ``overhead``, after
    the alerts, capgeo's share of the run's time so far (``capgeo/overhead_share``), as the progress bar shows it.
    """
    early = f"first {early_share:.0%} of the budget" if early_share else "early steps"
    charts: dict[str, list] = {f"accuracy ({acc_tag})": ["Multiline", [re.escape(acc_tag)]],
                               "forecast of the acquisition step": ["Multiline", [re.escape(FORECAST) + ".*"]],
                               "alerts raised": ["Multiline", [re.escape(ALERTS_TAG)]]}
    if overhead:
        charts["capgeo's share of the run's time"] = ["Multiline", [re.escape(OVERHEAD_TAG)]]
    for tag in reversed(rankme_tags):
        layer = tag.split("/", 1)[-1]
        charts[f"RankMe {layer}, {early}, and its floor"] = [
            "Multiline", [re.escape(EARLY_PREFIX + layer), re.escape(FLOOR_PREFIX + layer)]]
    every_layer = [re.escape(tag) for tag in rankme_tags] or [re.escape(RANKME) + ".*"]
    charts["RankMe, all layers, whole run"] = ["Multiline", every_layer]
    shown = [tag for tag in (logprob_tag, loss_tag) if tag]
    if shown:
        charts[" and ".join(f"{what} ({tag})" for what, tag in (("log-prob", logprob_tag), ("loss", loss_tag))
                            if tag)] = ["Multiline", [re.escape(tag) for tag in shown]]
    layout = {"capgeo: RankMe per layer vs accuracy": charts}
    if other_tags:
        layout["capgeo: other measures"] = {tag: ["Multiline", [re.escape(tag)]] for tag in other_tags}
    return layout


def dashboard_scalars(rankme: Mapping[str, Sequence[Sequence[float]]], step: int, early_end: float | None,
                      alerts_raised: int) -> dict[str, float]:
    """The presentation series at ``step`` (derived from RankMe, never stored in the summary): each layer's RankMe
    and its lowest value so far while ``step <= early_end``, and the count of run alerts."""
    values = {ALERTS_TAG: float(alerts_raised)}
    if early_end is not None and step > early_end:
        return values
    for layer, points in rankme.items():
        if points and int(points[-1][0]) == step:
            values[EARLY_PREFIX + layer] = float(points[-1][1])
            values[FLOOR_PREFIX + layer] = float(min(point[1] for point in points))
    return values
