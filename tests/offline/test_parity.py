"""Parity of the live and the offline summary of one run.

A real ``Trainer`` fit with ``RankMeMonitor``, ``LinearProbeMonitor`` and ``PrecursorDetector`` saves a
checkpoint after every evaluation; offline analysis of the run folder measures each checkpoint again and
builds its summary with the same builder. Every key the two summaries share must be equal: run info,
settings, acquisition, verdicts, per-layer results, transitions, alerts and their messages, rows,
selectors, and every series value (to 1e-6 relative: RankMe is recomputed from the same rows).
"""

from __future__ import annotations

import math
from typing import Any

from capgeo_callbacks.run.summary import SUMMARY_FILENAME, json_safe, read_summary
from tests.offline.conftest import LAYERS, NUM_ROWS, REL, SETTINGS, TrainedRun

SHARED = {
    # run info, from the run folder's summary
    "task", "difficulty", "size", "seed", "parameters", "max_steps", "lr", "task_params", "datamodule",
    # the summary builder's
    "steps", "monitor", "rows", "selectors", "settings", "acquisition_step", "verdict", "gap", "verdict_layer",
    "layers", "layer_order_rho", "logprob_emergence_step", "acc_at_logprob_emergence", "measures", "alerts", "series",
}
OFFLINE_ONLY = {"revisions", "skipped_revisions", "duplicate_weights", "warnings", "analysis"}


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


def test_live_and_offline_summaries_of_one_run_are_equal(trained_run: TrainedRun, offline_run: dict) -> None:
    detector = trained_run.detector
    assert detector.alerts, "the run must raise an alert, or the alerts comparison says nothing"
    assert detector.acquired_step is not None and detector.alerts[0].step < detector.acquired_step
    live = json_safe(detector.summary)
    assert read_summary(trained_run.run_dir) == live  # what offline analysis reads is what the detector built
    offline = offline_run

    shared = set(live) & set(offline)
    assert shared >= SHARED, f"not shared: {sorted(SHARED - shared)}"
    assert set(live) <= set(offline), f"live keys missing offline: {sorted(set(live) - set(offline))}"
    assert set(offline) - set(live) == OFFLINE_ONLY
    found = [d for key in sorted(shared) for d in differences(live[key], offline[key], key)]
    assert not found, "live and offline summaries differ:\n" + "\n".join(found[:40])

    # not vacuous: the compared values are the ones that matter
    assert offline["settings"] == SETTINGS.to_dict()
    assert [a["kind"] for a in offline["alerts"]][:3] == ["layer", "layer", "run"]
    assert all(a["message"].startswith("capgeo precursor alert at step") for a in offline["alerts"])
    assert offline["acquisition_step"] is not None and offline["verdict"] != "not-acquired"
    assert set(offline["layers"]) == {"blocks.0", "blocks.1", "norm_f"}
    assert offline["rows"] == {f"{p}/{layer}": NUM_ROWS for p in ("rankme", "probe_acc") for layer in offline["layers"]}
    assert offline["selectors"] == {"rankme": "answer", "probe_acc": "answer"}
    # measured again: accuracy, log-prob, RankMe and probes; carried from the live record: what a checkpoint
    # cannot tell (the training loss, the learning rate) and the per-token scores
    assert {tag for tag in offline["series"]} == {"acc", "val/logprob", *offline["rows"], "val/token_acc", "val/loss",
                                                  "train/loss", "lr"}
    assert len(offline["series"]["acc"]) == len(detector.acc) == 9

    # measured as the live monitor did, from what the run recorded
    analysis = offline["analysis"]
    assert analysis["watched"] == list(LAYERS) and analysis["num_rows"] == NUM_ROWS
    assert analysis["recorded"] == {"summary": str(trained_run.run_dir / SUMMARY_FILENAME), "monitor": "config",
                                    "settings": "run summary"}
    assert [r["name"] for r in offline["skipped_revisions"]] == ["last.ckpt"]  # same step and weights as step=36
    assert offline["duplicate_weights"] == []
