"""RankMe, linear probes and the precursor detector under real Lightning DDP (2 CPU processes, gloo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.callbacks.conftest import read_events

SCRIPT = Path(__file__).with_name("ddp_rankme_script.py")


@pytest.mark.slow
def test_measures_equal_one_process_and_side_effects_happen_once(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    # a rank waiting on a collective the other never joins would hang: the timeout fails the test instead
    result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True,
                            timeout=240, env=env, cwd=SCRIPT.parents[2])
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank_{r}.json").read_text()) for r in (0, 1)]
    zero, one = ranks
    assert zero["world_size"] == one["world_size"] == 2
    steps = list(range(8, 73, 8))

    # each rank holds 128 of the 256 validation rows; both measure the gathered 256, and agree exactly
    assert zero["rankme_rows"] == one["rankme_rows"] == {f"{measure}/layers.{i}": 256 for measure in ("rankme", "ildr")
                                                         for i in range(2)}  # ILDR: the rows and labels gathered
    assert zero["probe_rows"] == {"probe_acc/layers.0": 256, "probe_acc/layers.1": 256}
    assert zero["series"] == one["series"]
    # ... and equal one process's values on the same rows at the same weights, at every evaluation
    reference = zero["reference"]
    for tag in ("rankme/layers.0", "rankme/layers.1", "ildr/layers.0", "ildr/layers.1", "probe_acc/layers.0",
                "probe_acc/layers.1"):
        measured = zero["series"][tag]
        assert [step for step, _ in measured] == steps, tag
        assert [step for step, _ in reference[tag]] == steps, tag
        for (_, value), (_, expected) in zip(measured, reference[tag], strict=True):
            assert value == pytest.approx(expected, rel=1e-5, abs=1e-6), tag

    # the scripted collapse and recovery raise one layer alert and one run alert on every rank's detector...
    assert zero["alerts"] == one["alerts"]
    assert ["layer", "scripted", 72] in zero["alerts"] and ["run", "scripted", 72] in zero["alerts"]
    assert zero["verdict"] == one["verdict"] == "not-acquired"
    # ... but only rank zero logs them, writes text entries and the summary, and warns
    alert_logs = [m for m in zero["log_warnings"] if "precursor alert" in m]
    assert len(alert_logs) == len(zero["alerts"]) and one["log_warnings"] == []
    assert len(zero["capgeo_warnings"]) == 4  # "fewer rows than num_rows": per layer, RankMe and probes
    assert one["capgeo_warnings"] == []
    assert len(list(tmp_path.rglob("capgeo_summary.json"))) == 1
    assert len(list(tmp_path.rglob("events.out.tfevents.*"))) == 1
    events = read_events(tmp_path)
    text = {tag: len(events.Tensors(tag)) for tag in events.Tags()["tensors"] if tag.startswith("capgeo/")}
    assert sum(n for tag, n in text.items() if tag.startswith("capgeo/alerts")) == len(zero["alerts"])
    assert sum(n for tag, n in text.items() if tag.startswith("capgeo/verdict")) == 1
    assert [e.step for e in events.Scalars("rankme/layers.1")] == [s - 1 for s in steps]  # logged once per evaluation
    summary = json.loads((tmp_path / "capgeo_summary.json").read_text())
    assert summary["series"]["rankme/layers.1"] == zero["series"]["rankme/layers.1"]
    assert [a["step"] for a in summary["alerts"]] == [a[2] for a in zero["alerts"]]
