"""Dashboard pieces: the TensorBoard custom-scalars layout and the layer x step RankMe heatmap."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np


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


def rankme_heatmap(
    series: Mapping[str, Sequence[Sequence[float]]], acquisition_step: int | None = None,
    collapse_steps: Mapping[str, int | None] | None = None,
) -> np.ndarray:
    """Render a layer x step heatmap of RankMe as an RGB image (H, W, 3) uint8.

    Rows are layers (deepest at the top), columns evaluation steps; each row is normalised to its own
    peak so every layer's collapse is visible whatever its scale. The acquisition step is a dashed line,
    each layer's collapse step a white dot.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = [name for name, points in series.items() if points]
    steps = sorted({int(p[0]) for name in layers for p in series[name]})
    figure, axis = plt.subplots(figsize=(9, 1.2 + 0.45 * max(1, len(layers))), dpi=100)
    if layers and steps:
        index = {step: i for i, step in enumerate(steps)}
        grid = np.full((len(layers), len(steps)), np.nan)
        for row, name in enumerate(layers):
            for step, value in series[name]:
                grid[row, index[int(step)]] = value
            peak = np.nanmax(grid[row])
            if peak > 0:
                grid[row] /= peak
        extent = (steps[0], max(steps[-1], steps[0] + 1), -0.5, len(layers) - 0.5)
        image = axis.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=1, extent=extent,
                            interpolation="nearest", origin="lower")
        axis.set_yticks(range(len(layers)), layers)
        axis.set_xlabel("step")
        figure.colorbar(image, ax=axis, label="RankMe / layer peak", pad=0.01)
        if acquisition_step is not None:
            axis.axvline(acquisition_step, color="red", linestyle="--", linewidth=1.5, label="acquisition")
            axis.legend(loc="upper left", fontsize=8, framealpha=0.6)
        for row, name in enumerate(layers):
            step = (collapse_steps or {}).get(name)
            if step is not None:
                axis.plot([step], [row], "o", color="white", markersize=5, markeredgecolor="black")
    axis.set_title("RankMe per layer (deepest at top); o = collapse, dashed = acquisition", fontsize=9)
    figure.tight_layout()
    figure.canvas.draw()
    pixels = np.asarray(figure.canvas.buffer_rgba())[..., :3].copy()
    plt.close(figure)
    return pixels
