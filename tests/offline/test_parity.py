"""Offline = live: offline analysis of a run's checkpoints, with the live summary deleted first, recomputes every
series the rules read and gives the live run's alerts (alert for alert, every compared rule), forecasts, verdict
and summary.

A real ``Trainer`` fit with ``RankMeMonitor``, ``LinearProbeMonitor`` (every other evaluation) and
``PrecursorDetector`` running the study's rule and the rules in ``COMPARED_RULES`` saves a checkpoint after every
evaluation; offline analysis of a copy of the run folder without ``capgeo_summary.json`` reads the rules, settings
and run facts from the last checkpoint's run session, measures each checkpoint again and feeds the same session.
Every key the two summaries share must be equal: numbers to 1e-6 relative (RankMe is recomputed from the same rows),
all else exactly.
"""

from __future__ import annotations

import math
from typing import Any

from capgeo_callbacks.run.summary import json_safe, read_summary
from tests.offline.conftest import COMPARED_RULES, LAYERS, NUM_ROWS, PROBE_EVERY, REL, SETTINGS, TrainedRun

OFFLINE_ONLY = {"revisions", "skipped_revisions", "duplicate_weights", "warnings", "analysis"}
RECOMPUTED = {"acc", "val/acc", "val/token_acc", "val/logprob", "val/loss"}  # by the module's validation_step


def differences(live: Any, offline: Any, where: str) -> list[str]:
    """Every place where ``offline`` differs from ``live``: numbers to ``REL`` relative, all else exactly."""
    if isinstance(live, dict) and isinstance(offline, dict):
        found = [f"{where}: keys {sorted(set(live) ^ set(offline))} in only one"] if set(live) != set(offline) else []
        for key in sorted(set(live) & set(offline), key=str):
            found += differences(live[key], offline[key], f"{where}.{key}")
        return found
    if isinstance(live, list) and isinstance(offline, list):
        if len(live) != len(offline):
            return [f"{where}: {len(live)} items live, {len(offline)} offline"]
        pairs = enumerate(zip(live, offline, strict=True))
        return [d for i, (a, b) in pairs for d in differences(a, b, f"{where}[{i}]")]
    if isinstance(live, float) and isinstance(offline, (int, float)) and not isinstance(offline, bool):
        if math.isclose(live, offline, rel_tol=REL, abs_tol=1e-12):
            return []
    elif type(live) is type(offline) and live == offline:
        return []
    return [f"{where}: live {live!r}, offline {offline!r}"]


def test_offline_analysis_gives_the_live_runs_alerts_and_summary(trained_run: TrainedRun, offline_run: dict) -> None:
    live = json_safe(trained_run.detector.summary)
    assert read_summary(trained_run.run_dir) == live  # the live summary is the one the detector built
    offline = offline_run
    assert offline["analysis"]["recorded"]["summary"] is None  # it was deleted: nothing read from it
    assert offline["analysis"]["recorded"]["session"] is True

    # every rule compared, alert for alert
    assert list(offline["rules"]) == list(live["rules"]) == ["rankme-recovery", *COMPARED_RULES]
    assert "rules_left_out" not in live  # each compared rule had its inputs
    for rule in live["rules"]:
        mine = [alert for alert in live["alerts"] if alert["rule"] == rule]
        assert [alert for alert in offline["alerts"] if alert["rule"] == rule] == mine, rule
    assert offline["forecasts"] == live["forecasts"]
    assert (offline["verdict"], offline["gap"], offline["acquisition_step"]) == (
        live["verdict"], live["gap"], live["acquisition_step"])

    # and the whole summary
    assert set(offline) - set(live) == OFFLINE_ONLY and set(live) <= set(offline)
    found = [d for key in sorted(live) for d in differences(live[key], offline[key], key)]
    assert not found, "live and offline summaries differ:\n" + "\n".join(found[:40])

    # not vacuous: the compared rules said something, and the series were measured again
    alerting = {alert["rule"] for alert in live["alerts"] if alert["kind"] == "run"}
    assert {"rankme-recovery", "probe-crossing", "warmup-end", "clock-20", "loss-onset"} <= alerting, alerting
    assert live["forecasts"]["token_acc-threshold"] and live["forecasts"]["curve-families"]
    assert offline["acquisition_step"] is not None and offline["verdict"] != "not-acquired"
    assert offline["settings"] == SETTINGS.to_dict() and set(offline["layers"]) == {"blocks.0", "blocks.1", "norm_f"}
    measured = {tag for entry in offline["revisions"] for tag in entry["rankme"]}
    assert measured == {"blocks.0", "blocks.1", "norm_f"}
    assert RECOMPUTED - {"val/acc"} <= set(offline["series"])
    probed = [p[0] for p in offline["series"]["probe_acc/norm_f"]]
    assert probed == [p[0] for p in live["series"]["probe_acc/norm_f"]] == [
        p[0] for p in live["series"]["acc"]][::PROBE_EVERY]  # at the evaluations the live monitor measured
    measures = ("rankme", "ildr", "probe_acc")
    assert offline["rows"] == {f"{p}/{layer}": NUM_ROWS for p in measures for layer in offline["layers"]}
    assert {tag for entry in offline["revisions"] for tag in entry["ildr"]} == measured  # ILDR on RankMe's rows
    assert offline["analysis"]["watched"] == list(LAYERS) and offline["analysis"]["num_rows"] == NUM_ROWS
    assert [r["name"] for r in offline["skipped_revisions"]] == ["last.ckpt"]  # same step and weights as step=36
