"""What a run recorded, as offline analysis reads it: the monitors' config (or the state key, in checkpoints whose
states have no config), the module class, the run session, and the run info and detection settings of a live
summary."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from capgeo_callbacks.detection import DetectionSettings
from capgeo_callbacks.offline.recorded import (
    MonitorConfig,
    recorded_datamodule,
    recorded_factory,
    recorded_module_class,
    recorded_monitor,
    recorded_run_info,
    recorded_session,
    recorded_settings,
)
from capgeo_callbacks.run.failures import WarnOnce
from capgeo_callbacks.run.summary import build_summary

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_monitor_config_is_read_from_the_callback_state() -> None:
    config = {"layers": ["model.blocks.*"], "selector": "first_answer", "num_rows": 512, "prefix": "rankme",
              "mask_key": "answer_mask"}
    other = {**config, "prefix": "rankme_last", "layers": ["model.norm_f"]}
    checkpoint = {"callbacks": {
        "RankMeMonitor{'layers': ['model.norm_f'], 'prefix': 'rankme_last'}": {"series": {}, "config": other},
        "RankMeMonitor{'layers': ['ignored'], 'prefix': 'rankme'}": {"series": {}, "config": config},
        "LinearProbeMonitor{'layers': ['model.blocks.*'], 'prefix': 'probe_acc'}": {
            "config": {**config, "prefix": "probe_acc", "selector": "answer", "ridge": 0.01, "every_n_evals": 4}},
    }}
    assert recorded_monitor(checkpoint) == MonitorConfig(("model.blocks.*",), "first_answer", 512, "answer_mask")
    assert recorded_monitor(checkpoint, prefix="rankme_last").layers == ("model.norm_f",)
    probes = recorded_monitor(checkpoint, "probe_acc", "LinearProbeMonitor")
    assert probes == MonitorConfig(("model.blocks.*",), "answer", 512, "answer_mask", every_n_evals=4, setting=0.01)
    assert recorded_monitor({"callbacks": {}}) is None and recorded_monitor({}) is None
    assert recorded_session(checkpoint) is None  # no run session kept
    session = {"record": {}, "rules": [], "settings": {}, "run_info": {"task": "mod"}}
    assert recorded_session({"callbacks": {"PrecursorDetector{'monitor': 'val/acc'}": session}}) == session


def test_checkpoints_without_a_config_give_their_layers_from_the_state_key() -> None:
    checkpoint = json.loads((FIXTURES / "v1_callback_states.json").read_text())
    assert not any("config" in state for state in checkpoint["callbacks"].values())
    assert recorded_monitor(checkpoint) == MonitorConfig(("model.blocks.*", "model.norm_f"), source="state key")


def test_module_class_from_capgeo_record_or_hparams() -> None:
    assert recorded_module_class({"capgeo": {"module_class": "models.CapabilityModule"}}) == "models.CapabilityModule"
    assert recorded_module_class({"hyper_parameters": {"_class_path": "pkg.Module"}}) == "pkg.Module"
    assert recorded_module_class({"hyper_parameters": {"lr": 1e-3}}) is None


def test_run_info_settings_and_datamodule_of_a_live_summary(caplog) -> None:
    settings = DetectionSettings(min_drop=0.3, smoothing=1)
    run_info = {"task": "mod", "difficulty": "hard", "size": "xs", "seed": 3, "parameters": 1234,
                "max_steps": 100, "task_params": {"modulus": 7}, "datamodule": {"val_size": 256, "seed": 3}}
    summary = json.loads(json.dumps(build_summary(acc=[[10, 0.1], [20, 0.2]], series={"rankme/a": [[10, 5.0]]},
                                                  settings=settings, run_info=run_info, rows={"rankme/a": 64})))
    assert recorded_run_info(summary) == run_info  # everything the builder did not compute
    assert recorded_run_info({**summary, "rankme_rows": {"a": 64}}) == run_info  # an earlier name for rows
    warn = WarnOnce(emit=logging.getLogger("capgeo.analyze").warning)
    assert recorded_settings(summary, warn) == settings
    assert recorded_datamodule(summary, Path("s.json")) == (
        {"task": "mod", "difficulty": "hard", "seed": 3, "params": {"modulus": 7}, "val_size": 256},
        ["s.json"])
    # settings recorded before a field existed take its default
    assert recorded_settings({"settings": {"threshold": 0.6}}, warn) == DetectionSettings(threshold=0.6)
    with caplog.at_level(logging.WARNING, logger="capgeo"):
        assert recorded_settings({"settings": {"min_drop": 2.0}}, warn) is None
    assert "min_drop must be in (0, 1)" in warn.messages[0] and "min_drop" in caplog.text
    assert recorded_settings({}, warn) is None and recorded_datamodule(None, None) == ({}, [])


def test_the_datamodule_factory_is_the_one_the_run_recorded() -> None:
    assert recorded_factory({"datamodule_factory": "pkg.data.make"}) == "pkg.data.make"
    assert recorded_factory({"datamodule_factory": ""}) is None and recorded_factory({}) is None
    assert recorded_factory(None) is None
