"""What a run recorded: everything offline analysis needs to measure its checkpoints as the live run did.

- the LightningModule class: ``checkpoint["capgeo"]["module_class"]`` (written by the module's
  ``on_save_checkpoint``) or the ``_class_path`` of its hyperparameters;
- how the live hidden-state monitors measured (:class:`~capgeo_callbacks.RankMeMonitor`,
  :class:`~capgeo_callbacks.LinearProbeMonitor`): the ``"config"`` of their callback states (layers, selector,
  rows, mask key, cadence; a checkpoint without a config: the layers parsed from the state key);
- the run session (:class:`~capgeo_callbacks.run.session.RunSession`) the live run kept in its last full
  checkpoint: its rules, detection settings, run info and record, so that offline analysis runs the same rules on
  the same run facts; for runs whose checkpoints do not hold it, the run info and settings of the live summary;
- the datamodule factory (``datamodule_factory`` of the run info) and its arguments: ``task``, ``difficulty``,
  ``seed``, ``task_params`` and ``datamodule`` of the run info, then ``checkpoint["capgeo"]["datamodule"]`` and
  the checkpoint's ``datamodule_hyper_parameters``.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capgeo_callbacks.detection import DetectionSettings
from capgeo_callbacks.offline.revisions import Revision, load_checkpoint
from capgeo_callbacks.run.failures import WarnOnce
from capgeo_callbacks.run.reading import RunRecord, find_run_summary, read_run
from capgeo_callbacks.run.summary import run_info_of

__all__ = [
    "OFFLINE_KEYS",
    "MonitorConfig",
    "RecordedSetup",
    "read_record",
    "recorded_datamodule",
    "recorded_factory",
    "recorded_module_class",
    "recorded_monitor",
    "recorded_run_info",
    "recorded_session",
    "recorded_settings",
]

# the keys only an offline summary has
OFFLINE_KEYS = ("revisions", "skipped_revisions", "duplicate_weights", "warnings", "analysis")


@dataclass(frozen=True)
class MonitorConfig:
    """How a live hidden-state monitor measured.

    Attributes:
        layers: its layer patterns.
        selector: its token selector's name (None if not recorded).
        num_rows: its rows per layer (None if not recorded).
        mask_key: its answer-mask key (None if not recorded).
        every_n_evals: the evaluations it measured at (every n-th).
        setting: RankMe's epsilon, or the probe's ridge penalty (None if not recorded).
        target_key: the probe's label key (None if not recorded).
        source: ``"config"`` (the callback state's config) or ``"state key"`` (a checkpoint without a config).
    """

    layers: tuple[str, ...]
    selector: str | None = None
    num_rows: int | None = None
    mask_key: str | None = None
    every_n_evals: int = 1
    setting: float | None = None
    target_key: str | None = None
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
        probes: the live probe monitor's configuration.
        session: the live run session's state (:meth:`~capgeo_callbacks.run.session.RunSession.state_dict`).
    """

    module_class: str | None = None
    hyper_parameters: dict[str, Any] = field(default_factory=dict)
    monitor: MonitorConfig | None = None
    probes: MonitorConfig | None = None
    session: dict[str, Any] | None = None
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


def read_record(revisions: Sequence[Revision], allow_pickle: bool, warn: WarnOnce) -> RecordedSetup:
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
        record.probes = record.probes or recorded_monitor(checkpoint, "probe_acc", "LinearProbeMonitor")
        record.session = record.session or recorded_session(checkpoint)
        if not checkpoint_sources:
            checkpoint_datamodule, checkpoint_sources = _checkpoint_datamodule(checkpoint)
        del checkpoint
        if record.module_class and record.monitor and record.session and checkpoint_sources:
            break
    if record.session is not None:
        record.run_info = dict(record.session.get("run_info") or {})
        record.settings = recorded_settings(record.session, warn)
        source, where = record.run_info, "the run session in the checkpoint"
    elif summary is not None:
        record.run_info = recorded_run_info(summary)
        record.settings = recorded_settings(summary, warn)
        source, where = summary, str(record.summary_path)
    else:
        source, where = None, None
    record.datamodule_factory = recorded_factory(source)
    record.datamodule, record.sources = recorded_datamodule(source, where)
    record.datamodule.update(checkpoint_datamodule)
    record.sources += checkpoint_sources
    if summary is not None:
        record.steps = summary.get("steps") if isinstance(summary.get("steps"), int) else None
    return record


def recorded_session(checkpoint: Mapping[str, Any]) -> dict[str, Any] | None:
    """The state of the checkpoint's run session (kept by :class:`~capgeo_callbacks.PrecursorDetector`), if it has
    one with its rules."""
    states = checkpoint.get("callbacks") or {}
    if not isinstance(states, Mapping):
        return None
    return next((dict(state) for key, state in states.items() if isinstance(key, str)
                 and key.startswith("PrecursorDetector") and isinstance(state, Mapping) and "rules" in state), None)


def recorded_module_class(checkpoint: Mapping[str, Any]) -> str | None:
    """The dotted path of the checkpoint's LightningModule class, if it records one."""
    capgeo = checkpoint.get("capgeo") or {}
    if isinstance(capgeo, Mapping) and capgeo.get("module_class"):
        return str(capgeo["module_class"])
    hparams = checkpoint.get("hyper_parameters") or {}
    return str(hparams["_class_path"]) if isinstance(hparams, Mapping) and hparams.get("_class_path") else None


def recorded_monitor(checkpoint: Mapping[str, Any], prefix: str = "rankme",
                     kind: str = "RankMeMonitor") -> MonitorConfig | None:
    """The configuration of the checkpoint's ``kind`` monitor with tag prefix ``prefix``, if it has one.

    Read from the callback state's ``"config"``; for a checkpoint whose states have no config the layers are
    parsed from the state key ``RankMeMonitor{'layers': [...], 'prefix': 'rankme'}``.
    """
    states = checkpoint.get("callbacks") or {}
    if not isinstance(states, Mapping):
        return None
    monitors = {key: state for key, state in states.items()
                if isinstance(key, str) and key.startswith(kind) and isinstance(state, Mapping)}
    for state in monitors.values():
        config = state.get("config")
        if isinstance(config, Mapping) and config.get("prefix", prefix) == prefix and config.get("layers"):
            num_rows, every = config.get("num_rows"), config.get("every_n_evals", 1)
            setting = config.get("eps", config.get("ridge"))
            return MonitorConfig(
                layers=tuple(str(p) for p in config["layers"]),
                selector=str(config["selector"]) if config.get("selector") else None,
                num_rows=num_rows if isinstance(num_rows, int) and not isinstance(num_rows, bool) else None,
                mask_key=str(config["mask_key"]) if config.get("mask_key") else None,
                every_n_evals=every if isinstance(every, int) and every >= 1 else 1,
                setting=float(setting) if isinstance(setting, (int, float)) else None,
                target_key=str(config["target_key"]) if config.get("target_key") else None,
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
    """The dotted path of the datamodule factory a run's info records (``datamodule_factory``), or None."""
    factory = None if summary is None else summary.get("datamodule_factory")
    return factory if isinstance(factory, str) and factory else None


def recorded_datamodule(summary: Mapping[str, Any] | None,
                        where: str | Path | None) -> tuple[dict[str, Any], list[str]]:
    """Datamodule factory arguments from a run's info (``task``, ``difficulty``, ``seed``, ``task_params`` as
    ``params``, then ``datamodule``), and where they came from."""
    if summary is None:
        return {}, []
    kwargs = {key: summary[key] for key in ("task", "difficulty", "seed") if summary.get(key) is not None}
    if isinstance(summary.get("task_params"), Mapping):
        kwargs["params"] = dict(summary["task_params"])
    if isinstance(summary.get("datamodule"), Mapping):
        kwargs.update(summary["datamodule"])
    return kwargs, [str(where)]


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
    # "rankme_rows": an earlier name of "rows"
    return run_info_of(summary, exclude=(*OFFLINE_KEYS, "rankme_rows"))


def recorded_settings(summary: Mapping[str, Any], warn: WarnOnce) -> DetectionSettings | None:
    """The detection settings a live summary or session state records, or None (none recorded, or not valid)."""
    values = summary.get("settings")
    if not isinstance(values, Mapping):
        return None
    try:
        return DetectionSettings.from_dict(values)
    except (ValueError, TypeError) as err:
        warn("settings", f"the run records detection settings that are not valid ({err}); the defaults are used")
        return None


def _read_run(path: Path | None, warn: WarnOnce) -> RunRecord | None:
    if path is None:
        return None
    try:
        return read_run(path)
    except (OSError, ValueError) as err:
        warn("summary", f"cannot read {path} ({err}); what it records is not used")
        return None
