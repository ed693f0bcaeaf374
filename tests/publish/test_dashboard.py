from __future__ import annotations

from capgeo_callbacks.publish.dashboard import custom_scalars_layout


def test_layout_puts_accuracy_beside_each_layer_deepest_first() -> None:
    layout = custom_scalars_layout(["rankme/blocks.0", "rankme/blocks.1", "rankme/norm_f"], "val/acc", "val/logprob")
    (category,) = layout.values()
    titles = list(category)
    assert titles[:6] == ["accuracy (val/acc)", "forecast of the acquisition step", "alerts raised",
                          "RankMe norm_f, early steps, and its floor", "RankMe blocks.1, early steps, and its floor",
                          "RankMe blocks.0, early steps, and its floor"]
    assert category["RankMe norm_f, early steps, and its floor"] == ["Multiline", [r"rankme_early/norm_f",
                                                                                r"rankme_floor/norm_f"]]
    assert category["RankMe, all layers, whole run"][1] == [r"rankme/blocks\.0", r"rankme/blocks\.1",
                                                            r"rankme/norm_f"]


def test_the_loss_shares_the_log_probs_chart_so_a_run_logging_only_the_loss_fills_it() -> None:
    (category,) = custom_scalars_layout(["rankme/x"], "val/acc", "val/logprob", loss_tag="val/loss").values()
    assert category["log-prob (val/logprob) and loss (val/loss)"] == ["Multiline", [r"val/logprob", r"val/loss"]]
    (category,) = custom_scalars_layout(["rankme/x"], "val/acc", None, loss_tag="my/loss").values()
    assert category["loss (my/loss)"] == ["Multiline", [r"my/loss"]]


def test_dashboard_scalars_are_early_only_and_the_floor_is_the_lowest_so_far() -> None:
    from capgeo_callbacks.publish.dashboard import dashboard_scalars

    rankme = {"a": [[0, 30.0], [5, 12.0], [10, 20.0]], "b": [[0, 8.0]]}
    assert dashboard_scalars(rankme, 10, 100, 1) == {"capgeo/alerts_raised": 1.0, "rankme_early/a": 20.0,
                                                     "rankme_floor/a": 12.0}
    assert dashboard_scalars(rankme, 10, 9, 2) == {"capgeo/alerts_raised": 2.0}  # past the early part
