"""Figures drawn from a summary: the story of a run, the heatmap."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from capgeo_callbacks.detection import DetectionSettings
from capgeo_callbacks.publish.figures import figure_pixels, plot_run, rankme_heatmap, story_figure
from capgeo_callbacks.run.summary import build_summary
from tests.detection.conftest import replayed

STEPS = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
RANKME = [30.0, 28.0, 20.0, 8.0, 3.0, 2.5, 2.6, 4.0, 9.0, 14.0, 18.0, 20.0, 21.0]
ACC = [0.0] * 9 + [0.2, 0.6, 0.9, 1.0]


def summary() -> dict:
    rankme = {"norm_f": RANKME}
    alerts = replayed(STEPS, ACC, rankme, DetectionSettings())
    return build_summary(acc=[[s, a] for s, a in zip(STEPS, ACC, strict=True)],
                         series={"rankme/norm_f": [[s, v] for s, v in zip(STEPS, RANKME, strict=True)],
                                 "val/logprob": [[s, -3.0 + 2.9 * a] for s, a in zip(STEPS, ACC, strict=True)]},
                         settings=DetectionSettings(), alerts=alerts, logprob_key="val/logprob",
                         run_info={"task": "copy", "difficulty": "hard", "size": "xs"})


def test_story_figure_marks_collapse_recovery_alert_and_acquisition(tmp_path: Path) -> None:
    s = summary()
    assert s["alerts"] and s["acquisition_step"] == 512 and s["layers"]["norm_f"]["recovery_step"] is not None
    figure = story_figure(s)
    axis = figure.axes[0]
    assert axis.get_xscale() == "symlog" and axis.get_yscale() == "log"
    labels = [handle.get_label() for handle in axis.get_legend().legend_handles]
    assert "acquisition (step 512)" in labels
    assert any(label.startswith("rankme-recovery alert (step") for label in labels)
    assert {"collapse (per layer)", "recovery (per layer)", "RankMe norm_f"} <= set(labels)
    assert any(label.startswith("answer token probability") for label in labels)
    image = figure_pixels(figure)
    assert image.dtype == np.uint8 and image.shape[2] == 3 and len(np.unique(image.reshape(-1, 3), axis=0)) > 20
    path = plot_run("copy-hard-xs-s0", s, tmp_path / "story.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_story_figure_of_an_empty_summary_does_not_fail() -> None:
    empty = build_summary(acc=[], series={}, settings=DetectionSettings())
    assert figure_pixels(story_figure(empty)).ndim == 3


def test_heatmap_renders_each_layer_row() -> None:
    steps = range(10, 110, 10)
    series = {
        "blocks.0": [[s, 10.0] for s in steps],
        "norm_f": [[s, 10.0 if s < 50 else 2.0] for s in steps],
    }
    image = rankme_heatmap(series, acquisition_step=80, collapse_steps={"norm_f": 50, "blocks.0": None})
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert image.shape[0] > 50 and image.shape[1] > 200
    assert len(np.unique(image.reshape(-1, 3), axis=0)) > 20  # a real picture, not a blank canvas
    assert rankme_heatmap({}).ndim == 3  # nothing measured yet: an empty figure, no crash
