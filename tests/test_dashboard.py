from __future__ import annotations

from capgeo_callbacks.dashboard import custom_scalars_layout


def test_layout_puts_accuracy_beside_each_layer_deepest_first() -> None:
    layout = custom_scalars_layout(["rankme/blocks.0", "rankme/blocks.1", "rankme/norm_f"], "val/acc", "val/logprob")
    (category,) = layout.values()
    titles = list(category)
    assert titles[:4] == ["accuracy (val/acc)", "RankMe norm_f", "RankMe blocks.1", "RankMe blocks.0"]
    assert category["RankMe norm_f"] == ["Multiline", [r"rankme/norm_f"]]
    assert category["RankMe, all layers"][1] == [r"rankme/blocks\.0", r"rankme/blocks\.1", r"rankme/norm_f"]
