"""The TensorBoard custom-scalars layout (figures: :mod:`capgeo_callbacks.figures`)."""

from __future__ import annotations

import re
from collections.abc import Sequence


def custom_scalars_layout(
    rankme_tags: Sequence[str], acc_tag: str, logprob_tag: str | None = None,
    other_tags: Sequence[str] = (),
) -> dict[str, dict[str, list]]:
    """A custom-scalars layout that puts RankMe per layer beside accuracy on one screen.

    The first category opens with accuracy, then one chart per layer from the deepest down (the order
    in which the study saw layers collapse), so a collapse and the later rise in accuracy line up by
    step at a glance; then all layers on one chart and the log-prob.
    """
    charts: dict[str, list] = {f"accuracy ({acc_tag})": ["Multiline", [re.escape(acc_tag)]]}
    for tag in reversed(rankme_tags):
        charts[f"RankMe {tag.split('/', 1)[-1]}"] = ["Multiline", [re.escape(tag)]]
    charts["RankMe, all layers"] = ["Multiline", [re.escape(tag) for tag in rankme_tags] or ["rankme/.*"]]
    if logprob_tag:
        charts[f"log-prob ({logprob_tag})"] = ["Multiline", [re.escape(logprob_tag)]]
    layout = {"capgeo: RankMe per layer vs accuracy": charts}
    if other_tags:
        layout["capgeo: other measures"] = {tag: ["Multiline", [re.escape(tag)]] for tag in other_tags}
    return layout
