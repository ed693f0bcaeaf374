from __future__ import annotations

import numpy as np

from capgeo_callbacks.dashboard import custom_scalars_layout, rankme_heatmap


def test_layout_puts_accuracy_beside_each_layer_deepest_first() -> None:
    layout = custom_scalars_layout(["rankme/blocks.0", "rankme/blocks.1", "rankme/norm_f"], "val/acc", "val/logprob")
    (category,) = layout.values()
    titles = list(category)
    assert titles[:4] == ["accuracy (val/acc)", "RankMe norm_f", "RankMe blocks.1", "RankMe blocks.0"]
    assert category["RankMe norm_f"] == ["Multiline", [r"rankme/norm_f"]]
    assert category["RankMe, all layers"][1] == [r"rankme/blocks\.0", r"rankme/blocks\.1", r"rankme/norm_f"]


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
