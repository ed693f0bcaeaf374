"""detect_run on constructed series with known answers: verdicts, layer order, log-prob emergence, measures."""

from __future__ import annotations

import json
import math

import pytest

from capgeo_callbacks.detection import DetectionSettings, detect_run
from tests.detection.conftest import (
    PRECURSOR_ACC,
    PRECURSOR_RANKME,
    SIMULTANEOUS_ACC,
    SIMULTANEOUS_RANKME,
    STEPS,
    points,
)

KEYS = {"settings", "acquisition_step", "verdict", "gap", "verdict_layer", "layers", "layer_order_rho",
        "logprob_emergence_step", "acc_at_logprob_emergence", "measures", "labels"}
LAYER_KEYS = {"collapse_step", "collapse_floor", "peak", "peak_step", "drop_fraction", "recovery_step", "floor",
              "min_rankme", "verdict", "gap"}


def shifted(values: list[float], by: int) -> list[float]:
    """``values`` delayed by ``by`` evaluations (the first value repeated in front)."""
    return [values[0]] * by + values[: len(values) - by]


def test_precursor_with_exact_gap() -> None:
    result = detect_run(points(STEPS, PRECURSOR_ACC), {"blocks.0": points(STEPS, PRECURSOR_RANKME)})
    assert set(result) == KEYS
    json.dumps(result, allow_nan=False)
    assert result["settings"] == DetectionSettings().to_dict()
    assert result["acquisition_step"] == 1500
    assert (result["verdict"], result["gap"], result["verdict_layer"]) == ("precursor", 700, "blocks.0")
    assert result["layers"]["blocks.0"] == {
        "collapse_step": 800, "collapse_floor": 3.0, "peak": 10.0, "peak_step": 0,
        "drop_fraction": pytest.approx(0.7), "recovery_step": 1100, "floor": 3.0, "min_rankme": 3.0,
        "verdict": "precursor", "gap": 700}
    assert result["layer_order_rho"] is None  # one collapsed layer
    assert result["logprob_emergence_step"] is None and result["acc_at_logprob_emergence"] is None
    assert result["measures"] == {}


def test_simultaneous() -> None:
    result = detect_run(points(STEPS, SIMULTANEOUS_ACC), {"a": points(STEPS, SIMULTANEOUS_RANKME)})
    assert (result["acquisition_step"], result["verdict"], result["gap"], result["verdict_layer"]) == (
        800, "simultaneous", -100, "a")
    assert result["layers"]["a"]["collapse_step"] == 900


def test_no_collapse() -> None:
    result = detect_run(points(STEPS, PRECURSOR_ACC), {"a": points(STEPS, [10.0] * 20), "b": points(STEPS, [4.0] * 20)})
    assert (result["acquisition_step"], result["verdict"], result["gap"], result["verdict_layer"]) == (
        1500, "no-collapse", None, None)
    assert set(result["layers"]["a"]) == LAYER_KEYS
    assert result["layers"]["a"] == {**dict.fromkeys(LAYER_KEYS), "min_rankme": 10.0, "verdict": "no-collapse"}
    assert result["layers"]["b"]["min_rankme"] == 4.0
    assert result["layer_order_rho"] is None
    # with no layer at all, an acquired run is "no-collapse"
    assert detect_run(points(STEPS, PRECURSOR_ACC), {})["verdict"] == "no-collapse"


def test_not_acquired() -> None:
    acc = [0.1, 0.3, 0.49, 0.45] * 5
    result = detect_run(points(STEPS, acc), {"a": points(STEPS, PRECURSOR_RANKME)})
    assert (result["acquisition_step"], result["verdict"], result["gap"]) == (None, "not-acquired", None)
    assert result["layers"]["a"]["collapse_step"] == 800  # the collapse is still reported
    assert result["layers"]["a"]["verdict"] == "not-acquired"
    empty = detect_run([], {})
    assert (empty["acquisition_step"], empty["verdict"], empty["layers"], empty["layer_order_rho"]) == (
        None, "not-acquired", {}, None)


def test_the_settings_are_used_and_recorded() -> None:
    settings = DetectionSettings(window=7)
    result = detect_run(points(STEPS, PRECURSOR_ACC), {"a": points(STEPS, PRECURSOR_RANKME)}, settings)
    assert (result["verdict"], result["gap"]) == ("simultaneous", 700)  # 7 evaluations before: within the window
    assert result["settings"]["window"] == 7


def test_rankme_with_skipped_evaluations_is_aligned_to_the_accuracy_steps() -> None:
    # RankMe measured every other evaluation; the collapse is found on the measured points (raw: no smoothing)
    sparse = [[s, v] for s, v in zip(STEPS, PRECURSOR_RANKME, strict=True) if s % 200 == 0]
    result = detect_run(points(STEPS, PRECURSOR_ACC), {"a": sparse}, DetectionSettings(smoothing=1))
    # measured at 600 (5), 800 (3), 1000 (5), 1200 (9): trough 800, level 3.7 held at 1000 and 1200
    assert result["layers"]["a"]["collapse_step"] == 800
    assert result["layers"]["a"]["recovery_step"] == 1200
    assert (result["verdict"], result["gap"]) == ("precursor", 700)


@pytest.mark.parametrize(("order", "rho"), [(["b0", "b1", "b2"], -1.0), (["b2", "b1", "b0"], 1.0)])
def test_layer_order_sign(order: list[str], rho: float) -> None:
    # b0 collapses at 1000, b1 at 900, b2 at 800: top-down when b2 is the deepest (listed last)
    series = {"b0": shifted(PRECURSOR_RANKME, 2), "b1": shifted(PRECURSOR_RANKME, 1), "b2": PRECURSOR_RANKME}
    acc = [0.0] * 16 + [1.0] * 4  # acquisition at 1600: every trough is more than 3 evaluations before
    result = detect_run(points(STEPS, acc), {name: points(STEPS, series[name]) for name in order})
    assert {name: info["collapse_step"] for name, info in result["layers"].items()} == {
        "b0": 1000, "b1": 900, "b2": 800}
    assert result["layer_order_rho"] == pytest.approx(rho)
    assert list(result["layers"]) == order


def test_logprob_emergence() -> None:
    logprob = [[0, -3.0], [400, -1.5], [700, -0.6], [900, -0.2]]  # log(0.5) = -0.69: first reached at 700
    acc = points(STEPS, PRECURSOR_ACC)
    result = detect_run(acc, {}, logprob=logprob)
    assert result["logprob_emergence_step"] == 700
    assert result["acc_at_logprob_emergence"] == 0.0
    later = detect_run(acc, {}, DetectionSettings(logprob_threshold=-0.3), logprob=logprob)
    assert later["logprob_emergence_step"] == 900
    never = detect_run(acc, {}, DetectionSettings(logprob_threshold=-0.1), logprob=logprob)
    assert never["logprob_emergence_step"] is None and never["acc_at_logprob_emergence"] is None
    # log-prob at a step without an accuracy: the accuracy there is unknown (NaN)
    off = detect_run(acc, {}, logprob=[[0, -3.0], [1450, -0.1]])
    assert off["logprob_emergence_step"] == 1450 and math.isnan(off["acc_at_logprob_emergence"])


def test_measure_transitions_for_a_sparse_llc_series() -> None:
    steps = [100 * i for i in range(30)]
    acc = [0.0] * 13 + [0.1, 0.2] + [0.6] * 15  # acquisition at 1500 (evaluation 15)
    rankme = PRECURSOR_RANKME + [10] * 10
    # LLC every 4th evaluation: 0, 400, ..., 2400; a change of 3 at 800, a bigger one of 10 at 2000
    llc = [[0, 1.0], [400, 1.0], [800, 4.0], [1200, 4.0], [1600, 4.0], [2000, 14.0], [2400, 14.0]]
    probe = points(steps, [0.1] * 5 + [0.9] * 25)
    measures = {"rankme/b0": points(steps, rankme), "probe_acc/b0": probe, "llc": llc,
                "hessian/eig_0": [[1200, 3.0]], "loss/train": points(steps, [1.0] * 30)}
    result = detect_run(points(steps, acc), {"b0": points(steps, rankme)}, measures=measures)
    # the search ends 3 evaluations of the accuracy series after acquisition (1800): 2000 is left out; counted
    # on the LLC's own points it would have ended at its last point and found 2000
    assert result["measures"] == {
        "rankme/b0": {"kind": "collapse", "transition_step": 800, "precedes_acquisition": True},
        "probe_acc/b0": {"kind": "crossing", "transition_step": 500, "precedes_acquisition": True},
        "llc": {"kind": "change", "transition_step": 800, "precedes_acquisition": True},
    }  # one point (hessian) and an unknown tag (loss) get no transition
    assert result["measures"]["rankme/b0"]["transition_step"] == result["layers"]["b0"]["collapse_step"]
    # the kinds come from the settings
    as_collapse = DetectionSettings(measure_transitions={"llc": "collapse"})
    other = detect_run(points(steps, acc), {}, as_collapse, measures={"llc": llc, "probe_acc/b0": probe})
    assert set(other["measures"]) == {"llc"} and other["measures"]["llc"]["kind"] == "collapse"
    # not acquired: transitions over the whole series, precedes None
    never = detect_run(points(steps, [0.0] * 30), {}, measures={"llc": llc})
    assert never["measures"]["llc"] == {"kind": "change", "transition_step": 2000, "precedes_acquisition": None}
