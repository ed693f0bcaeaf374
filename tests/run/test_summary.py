"""The run summary: built from plain series, alert text, verdict table, JSON round trip."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from capgeo_callbacks.detection import Alert, CollapseAlert, DetectionSettings, detect_run
from capgeo_callbacks.publish.text import verdict_table
from capgeo_callbacks.run.summary import (
    COMPUTED_KEYS,
    OFFLINE_SUMMARY_FILENAME,
    SUMMARY_FILENAME,
    build_summary,
    json_safe,
    read_summary,
    run_info_of,
    write_summary,
)
from tests.detection.conftest import replayed

STEPS = [100 * i for i in range(20)]
# blocks.0: trough 800, recovered 1100; acquisition 1500 -> precursor, gap 700. blocks.1: flat, no collapse.
ACC = [0.0] * 13 + [0.1, 0.2, 0.6, 0.7, 0.8, 0.9, 1.0]
RANKME_0 = [10, 10, 10, 10, 10, 8, 5, 3, 3, 3, 5, 7, 9, 10, 10, 10, 10, 10, 10, 10]
RANKME_1 = [12.0] * 20
LOGPROB = [[0, -3.0], [400, -1.5], [700, -0.6], [900, -0.2]]  # reaches log(0.5) at 700
RUN_INFO = {"task": "add", "difficulty": "easy", "seed": 3}
DETECTION_KEYS = ["settings", "acquisition_step", "labels", "verdict", "gap", "verdict_layer", "layers",
                  "layer_order_rho", "logprob_emergence_step", "acc_at_logprob_emergence", "measures"]
SCHEMA = [*RUN_INFO, "parameters", "steps", "monitor", "rows", "selectors", *DETECTION_KEYS, "alerts", "series"]


def points(steps: list[int], values: list[float]) -> list[list[float]]:
    return [[step, value] for step, value in zip(steps, values, strict=True)]


def series() -> dict[str, list[list[float]]]:
    return {
        "rankme/blocks.0": points(STEPS, RANKME_0),
        "rankme/blocks.1": points(STEPS, RANKME_1),
        "probe_acc/blocks.0": points(STEPS, [0.1] * 5 + [0.9] * 15),
        "llc": [[0, 1.0], [400, 1.0], [800, 4.0], [1200, 4.0], [1600, 4.0]],
    }


def alerts() -> list[Alert]:
    return replayed(STEPS, ACC, {"blocks.0": RANKME_0, "blocks.1": RANKME_1})


def summary(**changes: object) -> dict:
    arguments = {"acc": points(STEPS, ACC), "series": {**series(), "val/logprob": LOGPROB},
                 "settings": DetectionSettings(), "alerts": alerts(), "monitor": "val/acc_seq",
                 "logprob_key": "val/logprob",
                 "run_info": RUN_INFO, "parameters": 1234, "rows": {"rankme/blocks.0": 256},
                 "selectors": {"rankme": "answer"}}
    return build_summary(**{**arguments, **changes})  # type: ignore[arg-type]


# --- build_summary --------------------------------------------------------------------------------


def test_build_summary_has_every_schema_key_with_run_info_first() -> None:
    built = summary()
    assert list(built) == SCHEMA
    assert {key: built[key] for key in RUN_INFO} == RUN_INFO
    assert (built["parameters"], built["steps"], built["monitor"]) == (1234, 1900, "val/acc_seq")
    assert built["rows"] == {"rankme/blocks.0": 256} and built["selectors"] == {"rankme": "answer"}
    json.dumps(built, allow_nan=False)


def test_build_summary_detection_results() -> None:
    built = summary()
    assert (built["acquisition_step"], built["verdict"], built["gap"], built["verdict_layer"]) == (
        1500, "precursor", 700, "blocks.0")
    assert list(built["layers"]) == ["blocks.0", "blocks.1"]  # the rankme/ tags, prefix removed, in order
    assert built["layers"]["blocks.0"]["collapse_step"] == 800
    assert built["layers"]["blocks.1"]["verdict"] == "no-collapse"
    assert (built["logprob_emergence_step"], built["acc_at_logprob_emergence"]) == (700, 0.0)
    assert built["measures"] == {
        "rankme/blocks.0": {"kind": "collapse", "transition_step": 800, "precedes_acquisition": True},
        "rankme/blocks.1": {"kind": "collapse", "transition_step": None, "precedes_acquisition": False},
        "probe_acc/blocks.0": {"kind": "crossing", "transition_step": 500, "precedes_acquisition": True},
        "llc": {"kind": "change", "transition_step": 800, "precedes_acquisition": True},
    }
    assert built["settings"] == DetectionSettings().to_dict()
    # exactly what detect_run finds on the same series
    found = detect_run(points(STEPS, ACC), {"blocks.0": points(STEPS, RANKME_0), "blocks.1": points(STEPS, RANKME_1)},
                       DetectionSettings(), logprob=LOGPROB, measures=series())
    assert {key: built[key] for key in DETECTION_KEYS} == found


def test_build_summary_alerts_and_series() -> None:
    built = summary()
    raised = alerts()
    assert [alert["kind"] for alert in built["alerts"]] == ["layer", "run"]
    assert built["alerts"] == [{"message": alert.message("val/acc_seq"), **asdict(alert)} for alert in raised]
    assert built["alerts"][0]["message"].startswith("capgeo precursor alert at step 1100")
    assert list(built["series"]) == ["acc", *series(), "val/logprob"]
    assert built["series"]["acc"] == points(STEPS, [float(a) for a in ACC])
    assert built["series"]["val/logprob"] == LOGPROB
    assert built["series"]["llc"] == series()["llc"]


def test_build_summary_plain_types_and_defaults() -> None:
    acc = [[np.int64(s), np.float32(a)] for s, a in zip(STEPS, ACC, strict=True)]
    built = summary(acc=acc, steps=2500, alerts=(), series=series(), run_info=None, parameters=None)
    assert built["steps"] == 2500 and built["parameters"] is None and built["alerts"] == []
    assert list(built)[0] == "parameters"
    assert "val/logprob" not in built["series"] and built["logprob_emergence_step"] is None
    first = built["series"]["acc"][0]
    assert type(first[0]) is int and type(first[1]) is float
    json.dumps(built, allow_nan=False)
    empty = build_summary(acc=[], series={}, settings=DetectionSettings())
    assert empty["steps"] == 0 and empty["verdict"] == "not-acquired" and empty["series"] == {"acc": []}
    assert empty["monitor"] == "val/acc"


def test_build_summary_rankme_prefix() -> None:
    renamed = {tag.replace("rankme/", "erank/"): pts for tag, pts in series().items()}
    built = summary(series=renamed, rankme_prefix="erank/")
    assert list(built["layers"]) == ["blocks.0", "blocks.1"] and built["verdict"] == "precursor"
    assert "erank/blocks.0" not in built["measures"]  # no transition kind for that tag by default


# --- alert message and verdict table --------------------------------------------------------------


def test_alert_message() -> None:
    layer = CollapseAlert(kind="layer", layer="blocks.0", step=1100, collapse_step=800, floor=3.0, recovery_step=1100)
    assert layer.message() == (
        "capgeo precursor alert at step 1100: RankMe of layer blocks.0 collapsed at step 800 (floor 3.00) and "
        "recovered by step 1100, while val/acc is still below the acquisition threshold")
    run = CollapseAlert(kind="run", layer="blocks.2", step=1400, collapse_step=900, floor=2.345, recovery_step=1300)
    assert run.message("val/exact_match") == (
        "capgeo precursor alert at step 1400: RankMe of the run (first layer: blocks.2) collapsed at step 900 "
        "(floor 2.35) and "
        "recovered by step 1300, while val/exact_match is still below the acquisition threshold. Such a dip comes "
        "early in most runs, also in runs that never learn: it says training has started, not that the task is "
        "coming")
    generic = Alert(step=600, rule="probe-crossing", evidence="probe probe_acc/blocks.0 reached 0.7")
    assert generic.message() == "capgeo probe-crossing alert at step 600: probe probe_acc/blocks.0 reached 0.7"
    assert set(asdict(generic)) == {"kind", "layer", "step", "rule", "evidence"}  # no geometry fields


def test_verdict_table_plain() -> None:
    lines = verdict_table(summary()).splitlines()
    assert lines[0] == ("verdict: precursor   gap: 700 steps   acquisition step: 1500   log-prob emergence step: "
                        "700   layer-order rho: -")
    assert lines[1].split("  ")[0] == "layer" and "collapse step" in lines[1]
    assert set(lines[2]) == {"-"}
    assert lines[3].split() == ["blocks.0", "800", "3.00", "1100", "precursor", "700"]
    assert lines[4].split() == ["blocks.1", "-", "-", "-", "no-collapse", "-"]
    assert len(lines) == 5
    # aligned columns
    assert lines[1].index("collapse step") == lines[3].index("800") == lines[4].index("-")
    assert lines[1].index("verdict") == lines[3].index("precursor") == lines[4].index("no-collapse")


def test_verdict_table_markdown() -> None:
    lines = verdict_table(summary(), markdown=True).splitlines()
    assert lines[0] == ("**verdict: precursor   gap: 700 steps   acquisition step: 1500   log-prob emergence "
                        "step: 700   layer-order rho: -**")
    assert lines[1:] == [
        "",
        "| layer | collapse step | floor | recovery step | verdict | gap |",
        "| --- | --- | --- | --- | --- | --- |",
        "| blocks.0 | 800 | 3.00 | 1100 | precursor | 700 |",
        "| blocks.1 | - | - | - | no-collapse | - |",
    ]


def test_verdict_table_without_acquisition() -> None:
    built = summary(acc=points(STEPS, [0.0] * 20), series=series())
    table = verdict_table(built, markdown=True)
    assert table.startswith("**verdict: not-acquired   gap: - steps   acquisition step: -   log-prob emergence "
                            "step: -   layer-order rho: -**")
    assert "| blocks.0 | 800 | 3.00 | 1100 | not-acquired | - |" in table.splitlines()


# --- files ----------------------------------------------------------------------------------------


def test_write_and_read_round_trip(tmp_path: Path) -> None:
    built = summary()
    built["series"]["llc"].append([2000, math.nan])
    built["acc_at_logprob_emergence"] = math.inf
    path = write_summary(built, tmp_path / "logs" / "version_0")  # the folder is created
    assert path == tmp_path / "logs" / "version_0" / SUMMARY_FILENAME

    def no_constants(token: str) -> None:
        raise AssertionError(f"{token} in the file: not valid JSON")

    json.loads(path.read_text(), parse_constant=no_constants)
    read = read_summary(path.parent)
    assert read == read_summary(path) == json_safe(built)
    assert read["series"]["llc"][-1] == [2000, None] and read["acc_at_logprob_emergence"] is None
    assert list(read) == SCHEMA
    assert verdict_table(read) == verdict_table(built)
    offline = write_summary(built, tmp_path, OFFLINE_SUMMARY_FILENAME)
    assert offline.name == OFFLINE_SUMMARY_FILENAME and read_summary(offline) == read


def test_json_safe() -> None:
    converted = json_safe({
        "f32": np.float32(0.5), "f64": np.float64(0.25), "i64": np.int64(7), "bool": np.bool_(True),
        "nan": np.float64(math.nan), "inf": math.inf, "t_float": torch.tensor(2.5), "t_int": torch.tensor(7),
        "t_inf": torch.tensor(-math.inf), "zero_d": np.array(1.5), 3: (1, np.int32(2)),
        "nested": {"deep": [np.float32(math.nan), {"x": torch.tensor(1.0)}]},
    })
    assert converted == {"f32": 0.5, "f64": 0.25, "i64": 7, "bool": True, "nan": None, "inf": None, "t_float": 2.5,
                         "t_int": 7, "t_inf": None, "zero_d": 1.5, "3": [1, 2], "nested": {"deep": [None, {"x": 1.0}]}}
    for key, kind in (("f32", float), ("i64", int), ("bool", bool), ("t_float", float), ("t_int", int),
                      ("zero_d", float)):
        assert type(converted[key]) is kind, key
    assert type(converted["3"][1]) is int
    json.dumps(converted, allow_nan=False)
    assert json_safe("text") == "text" and json_safe(None) is None


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_write_summary_never_writes_non_finite_numbers(tmp_path: Path, value: float) -> None:
    path = write_summary({"x": value, "y": [value, 1.0]}, tmp_path)
    assert json.loads(path.read_text()) == {"x": None, "y": [None, 1.0]}


def test_computed_keys_are_what_build_summary_computes() -> None:
    built = build_summary(acc=[], series={}, settings=DetectionSettings(), run_info={"task": "copy", "seed": 1})
    assert set(built) - set(COMPUTED_KEYS) == {"task", "seed", "parameters"}
    assert run_info_of(built) == {"task": "copy", "seed": 1, "parameters": None}


def test_rules_table_gives_first_warning_lead_and_the_last_forecast_before_acquisition() -> None:
    from capgeo_callbacks.publish.text import rules_table

    summary = {
        "acquisition_step": 600,
        "rules": {"study": {}, "probe-crossing": {}, "token_acc-threshold": {}, "silent": {}},
        "alerts": [{"rule": "study", "kind": "layer", "step": 40}, {"rule": "study", "kind": "run", "step": 50},
                   {"rule": "probe-crossing", "kind": "run", "step": 70},
                   {"rule": "probe-crossing", "kind": "run", "step": 90}],
        "forecasts": {"token_acc-threshold": [
            {"step": 300, "predicted": 650.4, "low": 500.0, "high": 800.0, "beyond": False},
            {"step": 590, "predicted": 610.0, "low": 601.0, "high": 640.0, "beyond": False},
            {"step": 700, "predicted": 600.0, "low": 600.0, "high": 600.0, "beyond": False}]},
    }
    rows = {line.split()[0]: line.split() for line in rules_table(summary).splitlines()[2:]}
    assert rows["study"][1:3] == ["50", "550"]  # the run-level alert, not the layer's
    assert rows["probe-crossing"][1:3] == ["70", "530"]
    assert " ".join(rows["token_acc-threshold"][3:]) == "610 [601, 640] at step 590"
    assert rows["silent"][1:] == ["-", "-", "-"]
    summary["acquisition_step"] = None
    summary["forecasts"]["token_acc-threshold"][-1]["beyond"] = True
    rows = {line.split()[0]: line for line in rules_table(summary).splitlines()[2:]}
    assert rows["token_acc-threshold"].endswith("not within the budget")
    assert rules_table({"rules": {}}) == ""
