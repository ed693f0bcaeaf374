"""What a run recorded: everything offline analysis needs to measure its checkpoints as the live run did.

- the LightningModule class: ``checkpoint["capgeo"]["module_class"]`` (written by the module's
  ``on_save_checkpoint``) or the ``_class_path`` of its hyperparameters;
- the watched layers, token selector, ``num_rows`` and mask key of the live
  :class:`~capgeo_callbacks.RankMeMonitor`: the ``"config"`` of its callback state (checkpoints written
  by capgeo 0.1 have no config: the layers are then parsed from the state key);
- the datamodule factory (``datamodule_factory`` of the run folder's ``capgeo_summary.json``) and its
  arguments: ``task``, ``difficulty``, ``seed``, ``task_params`` and ``datamodule`` of that summary, then
  ``checkpoint["capgeo"]["datamodule"]`` and the checkpoint's ``datamodule_hyper_parameters``;
- the run-info fields and the detection settings of the live summary (docs/design.md, "Summary"), so that
  an offline summary of the same run describes it the same way and detects with the same settings.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capgeo_callbacks.detection import DetectionSettings
from capgeo_callbacks.offline.measured import WarningLog
from capgeo_callbacks.offline.revisions import Revision, load_checkpoint
from capgeo_callbacks.run.reading import RunRecord, find_run_summary, read_run
from capgeo_callbacks.run.summary import run_info_of

__all__ = [
    "OFFLINE_KEYS",
    "MonitorConfig",
    "RecordedSetup",
    "read_record",
    "recorded_factory",
    "recorded_datamodule",
    "recorded_module_class",
    "recorded_monitor",
    "recorded_run_info",
    "recorded_settings",
]

# the keys only an offline summary has
OFFLINE_KEYS = ("revisions", "skipped_revisions", "duplicate_weights", "warnings", "analysis")


@dataclass(frozen=True)
class MonitorConfig:
    """How the live RankMe monitor measured.

    Attributes:
        layers: its layer patterns.
        selector: its token selector's name (None if not recorded).
        num_rows: its rows per layer (None if not recorded).
        mask_key: its answer-mask key (None if not recorded).
        source: ``"config"`` (the callback state's config) or ``"state key"`` (capgeo 0.1 checkpoints).
    """

    layers: tuple[str, ...]
    selector: str | None = None
    num_rows: int | None = None
    mask_key: str | None = None
    source: str = "config"


@dataclass
class RecordedSetup:
    """How a run was set up, as its checkpoints and live summary record it: everything offline analysis uses
    (all empty for Hugging Face folders).

    Attributes:
        module_class: dotted path of the LightningModule class.
        hyper_parameters: the module's hyperparameters (of the last checkpoint).
        monitor: the live RankMe monitor's configuration.
        datamodule_factory: dotted path of the datamodule factory the run recorded, if any.
        datamodule: datamodule factory arguments.
        sources: where those arguments came from.
        run_info: the run-info fields of the live summary (task, difficulty, size, seed, parameters, ...).
        steps: training steps the live summary records.
        settings: the live run's detection settings.
        run: the live run (:class:`~capgeo_callbacks.run.reading.RunRecord`: its ``capgeo_summary.json``), if
            there is one.
    """

    module_class: str | None = None
    hyper_parameters: dict[str, Any] = field(default_factory=dict)
    monitor: MonitorConfig | None = None
    datamodule_factory: str | None = None
    datamodule: dict[str, Any] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    run_info: dict[str, Any] = field(default_factory=dict)
    steps: int | None = None
    settings: DetectionSettings | None = None
    run: RunRecord | None = None

    @property
    def summary_path(self) -> Path | None:
        """The live run's ``capgeo_summary.json``, if there is one."""
        return None if self.run is None else self.run.path


def read_record(revisions: Sequence[Revision], allow_pickle: bool, warn: WarningLog) -> RecordedSetup:
    """What the checkpoints of ``revisions`` and their run folder record.

    Checkpoints are read from the last one back (a full ``last.ckpt`` holds the callback states that
    weights-only checkpoints lack) until the class, the monitor and the datamodule arguments are found.
    """
    record = RecordedSetup()
    if not revisions or revisions[0].kind != "lightning":
        return record
    record.run = _read_run(find_run_summary(revisions[0].path), warn)
    summary = None if record.run is None else record.run.summary
    checkpoint_datamodule: dict[str, Any] = {}
    checkpoint_sources: list[str] = []
    for revision in reversed(revisions):
        checkpoint = load_checkpoint(revision.path, allow_pickle)
        record.module_class = record.module_class or recorded_module_class(checkpoint)
        if not record.hyper_parameters and isinstance(checkpoint.get("hyper_parameters"), Mapping):
            record.hyper_parameters = dict(checkpoint["hyper_parameters"])
        record.monitor = record.monitor or recorded_monitor(checkpoint)
        if not checkpoint_sources:
            checkpoint_datamodule, checkpoint_sources = _checkpoint_datamodule(checkpoint)
        del checkpoint
        if record.module_class and record.monitor and checkpoint_sources:
            break
    record.datamodule_factory = recorded_factory(summary)
    record.datamodule, record.sources = recorded_datamodule(summary, record.summary_path)
    record.datamodule.update(checkpoint_datamodule)
    record.sources += checkpoint_sources
    if summary is not None:
        record.run_info = recorded_run_info(summary)
        record.steps = summary.get("steps") if isinstance(summary.get("steps"), int) else None
        record.settings = recorded_settings(summary, warn)
    return record


def recorded_module_class(checkpoint: Mapping[str, Any]) -> str | None:
    """The dotted path of the checkpoint's LightningModule class, if it records one."""
    capgeo = checkpoint.get("capgeo") or {}
    if isinstance(capgeo, Mapping) and capgeo.get("module_class"):
        return str(capgeo["module_class"])
    hparams = checkpoint.get("hyper_parameters") or {}
    return str(hparams["_class_path"]) if isinstance(hparams, Mapping) and hparams.get("_class_path") else None


def recorded_monitor(checkpoint: Mapping[str, Any], prefix: str = "rankme") -> MonitorConfig | None:
    """The configuration of the checkpoint's RankMe monitor with tag prefix ``prefix``, if it has one.

    Read from the callback state's ``"config"``; for checkpoints of capgeo 0.1 (no config) the layers are
    parsed from the state key ``RankMeMonitor{'layers': [...], 'prefix': 'rankme'}``.
    """
    states = checkpoint.get("callbacks") or {}
    if not isinstance(states, Mapping):
        return None
    monitors = {key: state for key, state in states.items()
                if isinstance(key, str) and key.startswith("RankMeMonitor") and isinstance(state, Mapping)}
    for state in monitors.values():
        config = state.get("config")
        if isinstance(config, Mapping) and config.get("prefix", "rankme") == prefix and config.get("layers"):
            num_rows = config.get("num_rows")
            return MonitorConfig(
                layers=tuple(str(p) for p in config["layers"]),
                selector=str(config["selector"]) if config.get("selector") else None,
                num_rows=num_rows if isinstance(num_rows, int) and not isinstance(num_rows, bool) else None,
                mask_key=str(config["mask_key"]) if config.get("mask_key") else None,
            )
    for key, state in monitors.items():
        if "config" in state:  # written by this version: its config was read above
            continue
        try:
            info = ast.literal_eval(key[len("RankMeMonitor"):])
        except (ValueError, SyntaxError):
            continue
        if isinstance(info, dict) and info.get("prefix", "rankme") == prefix and info.get("layers"):
            return MonitorConfig(layers=tuple(str(p) for p in info["layers"]), source="state key")
    return None


def recorded_factory(summary: Mapping[str, Any] | None) -> str | None:
    """The dotted path of the datamodule factory a live summary records (``datamodule_factory``), or None."""
    factory = None if summary is None else summary.get("datamodule_factory")
    return factory if isinstance(factory, str) and factory else None


def recorded_datamodule(summary: Mapping[str, Any] | None, path: Path | None) -> tuple[dict[str, Any], list[str]]:
    """Datamodule factory arguments from a live summary (``task``, ``difficulty``, ``seed``,
    ``task_params`` as ``params``, then ``datamodule``), and where they came from."""
    if summary is None:
        return {}, []
    kwargs = {key: summary[key] for key in ("task", "difficulty", "seed") if summary.get(key) is not None}
    if isinstance(summary.get("task_params"), Mapping):
        kwargs["params"] = dict(summary["task_params"])
    if isinstance(summary.get("datamodule"), Mapping):
        kwargs.update(summary["datamodule"])
    return kwargs, [str(path)]


def _checkpoint_datamodule(checkpoint: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    kwargs: dict[str, Any] = {}
    sources: list[str] = []
    capgeo = checkpoint.get("capgeo") or {}
    if isinstance(capgeo, Mapping) and isinstance(capgeo.get("datamodule"), Mapping):
        kwargs.update(capgeo["datamodule"])
        sources.append("checkpoint['capgeo']['datamodule']")
    hparams = checkpoint.get("datamodule_hyper_parameters")
    if isinstance(hparams, Mapping):
        kwargs.update(dict(hparams))
        sources.append("checkpoint['datamodule_hyper_parameters']")
    return kwargs, sources


def recorded_run_info(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The run-info fields of a live summary: every key :func:`~capgeo_callbacks.run.summary.build_summary`
    does not compute (``parameters`` included, which it takes from the run info when given)."""
    # "rankme_rows": the name of "rows" in summaries of capgeo 0.1
    return run_info_of(summary, exclude=(*OFFLINE_KEYS, "rankme_rows"))


def recorded_settings(summary: Mapping[str, Any], warn: WarningLog) -> DetectionSettings | None:
    """The detection settings a live summary records, or None (none recorded, or not valid)."""
    values = summary.get("settings")
    if not isinstance(values, Mapping):
        return None
    try:
        return DetectionSettings.from_dict(values)
    except (ValueError, TypeError) as err:
        warn("settings", f"the run's summary records detection settings that are not valid ({err}); the "
             "defaults are used")
        return None


def _read_run(path: Path | None, warn: WarningLog) -> RunRecord | None:
    if path is None:
        return None
    try:
        return read_run(path)
    except (OSError, ValueError) as err:
        warn("summary", f"cannot read {path} ({err}); what it records is not used")
        return None
