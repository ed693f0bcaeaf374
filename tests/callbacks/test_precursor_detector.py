"""PrecursorDetector on a real Trainer, fed scripted series through a real (scripted) measure callback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.data import DataLoader, TensorDataset

from capgeo_callbacks import DetectionSettings, LinearProbeMonitor, PrecursorDetector, RankMeMonitor
from capgeo_callbacks.detection import align, scan_alerts
from capgeo_callbacks.offline.story import draw_story
from capgeo_callbacks.rules import RankMeRecoveryRule
from tests.callbacks.conftest import read_events
from tests.callbacks.scripted import INTERVAL, RANKME, ScriptedAccuracy, ScriptedMeasure


def run(tmp_path, steps: int, detector: PrecursorDetector, ckpt_path: str | None = None) -> Trainer:
    data = TensorDataset(torch.randn(8, 2))
    trainer = Trainer(
        max_steps=steps, val_check_interval=INTERVAL, check_val_every_n_epoch=None, accelerator="cpu",
        logger=TensorBoardLogger(str(tmp_path), name="", version=""), callbacks=[ScriptedMeasure(), detector],
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        enable_checkpointing=ckpt_path is None,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(ScriptedAccuracy(), DataLoader(data, batch_size=1), DataLoader(data, batch_size=8),
                ckpt_path=ckpt_path)
    return trainer


def study_detector(**options: Any) -> PrecursorDetector:
    """The detector with the study's rule alone (the scripted series are the study rule's story)."""
    settings = DetectionSettings(smoothing=1)
    return PrecursorDetector(settings=settings, rules=[RankMeRecoveryRule(settings)], **options)


def test_live_alert_summary_and_tensorboard(tmp_path) -> None:
    alerts = []
    detector = study_detector(on_alert=alerts.append, run_info={"task": "scripted"},
                              overhead_budget=None)  # every live card drawn
    run(tmp_path, steps=10 * len(RANKME), detector=detector)

    # collapse at eval 5 (step 60); recovery: above 8 + 10% of the 32-point drop at steps 80 and 90
    assert [(a.kind, a.step, a.collapse_step, a.recovery_step) for a in alerts] == [
        ("layer", 90, 60, 90), ("run", 90, 60, 90)]
    summary = json.loads((tmp_path / "capgeo_summary.json").read_text())
    assert summary["task"] == "scripted"
    assert summary["acquisition_step"] == 120
    assert summary["verdict"] == "precursor"
    assert summary["gap"] == 120 - 60
    assert summary["layers"]["last"]["floor"] == 8
    assert summary["logprob_emergence_step"] == 110  # eval 10: -3 + 0.25 * 10 = -0.5 >= log(0.5)
    assert summary["acc_at_logprob_emergence"] == 0.0
    assert len(summary["series"]["rankme/last"]) == len(RANKME)
    assert summary["measures"]["rankme/last"] == {"kind": "collapse", "transition_step": 60,
                                                  "precedes_acquisition": True}
    assert summary["measures"]["probe_acc/last"] == {"kind": "crossing", "transition_step": 70,
                                                     "precedes_acquisition": True}
    assert summary["alerts"][0]["message"].startswith("capgeo precursor alert at step 90: RankMe of layer last")
    for key in ("parameters", "steps", "layer_order_rho", "rows", "selectors", "alerts"):
        assert key in summary

    events = read_events(tmp_path)
    tags = events.Tags()
    assert "rankme/last" in tags["scalars"] and "val/acc" in tags["scalars"]
    assert {"capgeo/rankme_heatmap", "capgeo/story"} <= set(tags["images"])
    # the story card where the story changes: the run alert (90), acquisition at 120 confirmed at 140 (patience 3),
    # and the end (200); not at every evaluation
    assert [image.step for image in events.Images("capgeo/story")] == [90, 140, 10 * len(RANKME)]
    # the full story figure is drawn after training, on demand, from the summary
    assert not (tmp_path / "capgeo_story.png").exists()
    assert draw_story(tmp_path) == tmp_path / "capgeo_story.png"
    assert (tmp_path / "capgeo_story.png").read_bytes()[:4] == b"\x89PNG"
    text_tags = [t for t in tags["tensors"] if t.startswith("capgeo/")]
    assert any(t.startswith("capgeo/alerts") for t in text_tags)
    assert any(t.startswith("capgeo/verdict") for t in text_tags)
    alert_text = [e for t in text_tags if t.startswith("capgeo/alerts") for e in events.Tensors(t)]
    assert len(alert_text) == 2  # one per layer, one for the run: each once


def test_resume_does_not_repeat_alerts(tmp_path) -> None:
    first: list = []
    run(tmp_path / "a", steps=100,
        detector=study_detector(on_alert=first.append))
    assert [a.kind for a in first] == ["layer", "run"]
    checkpoint = next((tmp_path / "a").rglob("*.ckpt"))
    second: list = []
    detector = study_detector(on_alert=second.append)
    run(tmp_path / "b", steps=10 * len(RANKME), detector=detector, ckpt_path=str(checkpoint))
    assert second == []  # already raised before the interruption
    summary = detector.summary
    assert summary["verdict"] == "precursor" and summary["gap"] == 60
    steps = [p[0] for p in summary["series"]["acc"]]
    assert steps == list(range(10, 10 * len(RANKME) + 1, 10))  # no gap, no duplicate


def test_the_earliest_checkpoint_layout_resumes(tmp_path) -> None:
    """Callback states in the earliest checkpoint layout (tests/fixtures, written by the code of that time) restore
    into the current callbacks: series, evaluation count, rows, accuracy, log-prob and alerts, none raised twice."""
    saved = json.loads((Path(__file__).parents[1] / "fixtures" / "v1_callback_states.json").read_text())
    states = saved["callbacks"]
    detector_key = next(key for key in states if key.startswith("PrecursorDetector"))
    detector = PrecursorDetector()
    assert detector.state_key == detector_key  # Lightning finds the state under the same key
    detector.load_state_dict(states[detector_key])
    tracker = states[detector_key]["tracker"]
    assert [p[0] for p in detector.acc] == tracker["steps"]
    assert [p[1] for p in detector.acc] == tracker["acc"]
    assert detector.scalars["val/logprob"] == states[detector_key]["logprob_series"]
    assert [(a.kind, a.layer, a.step) for a in detector.alerts] == [
        (a["kind"], a["layer"], a["step"]) for a in tracker["alerts"]]
    rankme = RankMeMonitor(layers=["model.blocks.*", "model.norm_f"])
    rankme_key = next(key for key in states if key.startswith("RankMeMonitor"))
    assert rankme.state_key == rankme_key
    rankme.load_state_dict(states[rankme_key])
    assert rankme.series == states[rankme_key]["series"] and rankme.evaluations == 30
    assert rankme.rows == {f"rankme/{layer}": n for layer, n in states[rankme_key]["rows_used"].items()}
    probes = LinearProbeMonitor(layers=["model.blocks.*", "model.norm_f"])
    probes.load_state_dict(states[next(key for key in states if key.startswith("LinearProbeMonitor"))])
    assert probes.rows and all(tag.startswith("probe_acc/") for tag in probes.rows)
    # no alert is raised again on the restored series: every layer already alerted
    steps = [p[0] for p in detector.acc]
    layers = {tag.split("/", 1)[1]: align(points, steps) for tag, points in rankme.series.items()}
    assert scan_alerts(steps, [p[1] for p in detector.acc], layers, detector.settings, detector.alerts) == []
