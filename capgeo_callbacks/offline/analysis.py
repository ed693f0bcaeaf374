"""Offline analysis: per-layer RankMe and precursor detection over the saved revisions of one model.

Each revision is measured on a fixed probe set (Lightning checkpoints with the live monitors inside
``Trainer.validate``, Hugging Face folders with ``output_hidden_states``), revisions with identical weights
are flagged, and the series go through the same detection and the same summary builder as a live run
(:func:`~capgeo_callbacks.run.summary.build_summary`, with the alerts a live run would have raised replayed by
:func:`~capgeo_callbacks.detection.replay_alerts`). The summary has the keys of ``capgeo_summary.json``
(docs/design.md, "Summary") plus ``revisions``, ``skipped_revisions``, ``duplicate_weights``, ``warnings``
and ``analysis`` (how it was measured).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from capgeo_callbacks.capture.selectors import ANSWER_SELECTORS, SELECTORS, Selector, selector_name, validate_selector
from capgeo_callbacks.detection import DetectionSettings
from capgeo_callbacks.offline.measure_hf import HF_NOTE, load_hf, measure_hf
from capgeo_callbacks.offline.measure_lightning import load_module, measure_lightning, resolve_module_class
from capgeo_callbacks.offline.measured import Measured, WarningLog, log
from capgeo_callbacks.offline.probe_sets import ProbeSet, build_probe_set
from capgeo_callbacks.offline.recorded import RecordedSetup, read_record
from capgeo_callbacks.offline.revisions import (
    Revision,
    duplicate_groups,
    find_revisions,
    load_checkpoint,
    weights_sha256,
)
from capgeo_callbacks.run.failures import DEFAULT_LAYERS
from capgeo_callbacks.run.summary import alert_message, json_safe
from capgeo_callbacks.run.tracker import RunTracker

__all__ = ["DEFAULT_NUM_ROWS", "analyze"]

DEFAULT_NUM_ROWS = 2048
RANKME_PREFIX = "rankme/"
PROBE_PREFIX = "probe_acc/"

MeasureFn = Callable[[Revision, Any], tuple[Measured, list[str]]]
"""``measure(revision, hf_model_or_None) -> (measurements, layer labels)``."""


def analyze(
    paths: str | Path | Sequence[str | Path],
    *,
    probe_file: str | Path | None = None,
    task: str | None = None,
    difficulty: str | None = None,
    seed: int | None = None,
    datamodule_factory: str | None = None,
    datamodule_kwargs: Mapping[str, Any] | None = None,
    split: str = "val",
    module_class: str | None = None,
    module_kwargs: Mapping[str, Any] | None = None,
    selector: Selector | None = None,
    num_rows: int | None = None,
    layers: Sequence[str] | None = None,
    probes: bool = False,
    batch_size: int = 256,
    device: str = "cpu",
    dtype: str = "float32",
    monitor: str = "val/acc",
    logprob_monitor: str | None = "val/logprob",
    mask_key: str | None = None,
    drop_duplicates: bool = False,
    allow_pickle: bool = False,
    settings: DetectionSettings | None = None,
) -> dict[str, Any]:
    """Per-layer RankMe and detection over saved revisions, as a run summary.

    Args:
        paths: ``.ckpt`` files, folders of them (or run folders with ``checkpoints/``), Hugging Face model
            folders, or folders of revision subfolders (``step1000/``...).
        probe_file: a ``torch.save``'d dict with ``input_ids`` (N x T) and optionally ``answer_mask``,
            ``targets``, ``attention_mask``; replaces the datamodule probe set.
        task: task name for the datamodule factory (default: what the run folder or checkpoint records).
        difficulty: difficulty for the datamodule factory (likewise).
        seed: datamodule seed (likewise; else the factory's default).
        datamodule_factory: dotted path of a callable ``(task=..., difficulty=..., **kwargs)`` returning a
            datamodule (or anything with ``val_dataloader()``); resolved at run time (default: the one the run's
            summary records as ``datamodule_factory``; ``train.py`` records its own).
        datamodule_kwargs: more factory arguments (e.g. ``{"val_size": 256}``); they override recorded ones.
        split: ``"val"`` or ``"test"``: which loader of the datamodule is the probe set.
        module_class: dotted path of the LightningModule class of ``.ckpt`` files (default: recorded in
            the checkpoint as ``checkpoint["capgeo"]["module_class"]`` or the hparams' ``_class_path``).
        module_kwargs: overrides passed to ``load_from_checkpoint``.
        selector: token rows (one of :data:`~capgeo_callbacks.capture.selectors.SELECTORS` or a callable; default:
            the live RankMe monitor's, else ``answer`` when the probe set has the answer mask, else ``last``).
        num_rows: RankMe rows per layer, the first selected rows of the probe set (default: the live
            monitor's, else 2048).
        layers: module names or globs to watch (``.ckpt``: over ``named_modules()``, default the live
            monitor's patterns, else ``**.blocks.*``, ``**.norm_f``; Hugging Face: globs over the labels
            ``embed``, ``layers.*``, default all).
        probes: also measure held-out linear probe accuracy per layer (needs the ``answer`` selector).
        batch_size: batch size over a probe file.
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: Hugging Face weights dtype (``float32``, ``bfloat16``, ``float16`` or ``auto``).
        monitor: accuracy key the LightningModule logs (``.ckpt``); Hugging Face models are scored by exact
            match of the answer when the probe set has ``targets`` and the answer mask.
        logprob_monitor: log-prob key the LightningModule logs, for log-prob emergence.
        mask_key: batch key of the answer mask (default: the live monitor's, else ``answer_mask``).
        drop_duplicates: leave out revisions whose weights equal an earlier revision's (default: keep them,
            with a warning, reusing the earlier values).
        allow_pickle: unpickle checkpoints fully (``weights_only=False``); only for files you trust.
        settings: detection settings (default: those the live run's summary records, else the defaults).

    Returns:
        The summary (JSON-safe): the keys of ``capgeo_summary.json`` plus ``revisions``,
        ``skipped_revisions``, ``duplicate_weights``, ``warnings`` and ``analysis``.

    Raises:
        ValueError: on a bad argument, a revision series that cannot be ordered, or a probe set or class
            that cannot be resolved (the message says what to pass).
        ImportError: for Hugging Face folders without ``transformers`` installed.
    """
    if selector is not None:
        validate_selector(selector)
    if num_rows is not None and (isinstance(num_rows, bool) or not isinstance(num_rows, int) or num_rows < 2):
        raise ValueError(f"num_rows must be an integer >= 2, got {num_rows!r}")
    if split not in ("val", "test"):
        raise ValueError(f"split must be 'val' or 'test', got {split!r}")
    if settings is not None and not isinstance(settings, DetectionSettings):
        raise ValueError(f"settings must be a DetectionSettings (e.g. DetectionSettings(min_drop=0.3)), got "
                         f"{type(settings).__name__}")
    warn = WarningLog()
    revisions = find_revisions(paths, allow_pickle=allow_pickle)
    kind = revisions[0].kind
    log.info("analysing %d %s revision(s): %s", len(revisions), kind, ", ".join(r.name for r in revisions))
    record = read_record(revisions, allow_pickle, warn)
    recorded_monitor = record.monitor
    mask = mask_key or (recorded_monitor and recorded_monitor.mask_key) or "answer_mask"
    probe = build_probe_set(probe_file_path=probe_file, recorded=record.datamodule, sources=record.sources,
                            task=task, difficulty=difficulty, seed=seed,
                            factory=datamodule_factory or record.datamodule_factory, factory_kwargs=datamodule_kwargs,
                            split=split, batch_size=batch_size, kind=kind, warn=warn)
    chosen = _choose_selector(selector, record, probe, mask, warn)
    rows_per_layer = num_rows or (recorded_monitor and recorded_monitor.num_rows) or DEFAULT_NUM_ROWS
    watch: list[str] | None = list(layers) if layers else None
    cls = None
    if kind == "lightning":
        cls = resolve_module_class(module_class, record.module_class, revisions[0].path)
        watch = watch or (list(recorded_monitor.layers) if recorded_monitor else list(DEFAULT_LAYERS))
    chosen_settings = settings or record.settings or DetectionSettings()

    def measure(revision: Revision, model: Any) -> tuple[Measured, list[str]]:
        if kind == "lightning":
            module = load_module(cls, revision.path, module_kwargs, allow_pickle)
            return measure_lightning(module, probe, layers=watch, selector=chosen, num_rows=rows_per_layer,
                                     probes=probes, device=device, monitor=monitor, logprob_monitor=logprob_monitor,
                                     mask_key=mask, warn=warn)
        return measure_hf(model, probe, layers=watch, selector=chosen, num_rows=rows_per_layer, probes=probes,
                          device=device, mask_key=mask, warn=warn)

    results, skipped, labels = _measure_revisions(revisions, measure, device=device, dtype=dtype,
                                                  drop_duplicates=drop_duplicates, allow_pickle=allow_pickle)
    duplicates = duplicate_groups(results)
    for group in duplicates:
        digest = group["weights_sha256"]
        warn(f"dup:{digest}", f"revisions {', '.join(group['revisions'])} hold identical weights (sha256 "
             f"{digest[:12]}...): their RankMe is the same by construction, so a flat stretch there is not geometry")
    summary = _offline_summary(results, labels or (list(results[0]["rankme"]) if results else []), kind=kind,
                               record=record, probe=probe, settings=chosen_settings, selector=chosen,
                               monitor=monitor, logprob_monitor=logprob_monitor, warn=warn)
    summary["analysis"] = {
        "source": "offline", "model_kind": kind, "selector": selector_name(chosen), "num_rows": rows_per_layer,
        "probe_set": probe.description, "layers": labels, "watched": watch, "acc": summary["monitor"],
        "recorded": {"summary": str(record.summary_path) if record.summary_path else None,
                     "monitor": recorded_monitor.source if recorded_monitor else None,
                     "settings": "given" if settings else ("run summary" if record.settings else "default")},
    }
    if kind == "hf":
        summary["analysis"]["layer_note"] = HF_NOTE
    summary.update({"revisions": [{k: v for k, v in r.items() if not k.startswith("_")} for r in results],
                    "skipped_revisions": skipped, "duplicate_weights": duplicates, "warnings": warn.messages})
    return json_safe(summary)


def _choose_selector(selector: Selector | None, record: RecordedSetup, probe: ProbeSet, mask_key: str,
                     warn: WarningLog) -> Selector:
    """The given selector, else the live monitor's, else ``answer`` with an answer mask, else ``last``.

    Raises:
        ValueError: if an answer selector is chosen but the probe set has no answer mask.
    """
    recorded = record.monitor.selector if record.monitor else None
    if selector is None and recorded is not None and recorded not in SELECTORS:
        warn("selector", f"the live monitor used a custom selector {recorded!r}, which offline analysis cannot "
             "rebuild; pass selector= (the default is used)")
        recorded = None
    chosen = selector or recorded or ("answer" if mask_key in probe.keys else "last")
    if isinstance(chosen, str) and chosen in ANSWER_SELECTORS and probe.keys and mask_key not in probe.keys:
        raise ValueError(f"selector {chosen!r} needs {mask_key!r} in the probe set, which has keys "
                         f"{sorted(probe.keys)}; pass --selector last (or mean, all), or a probe set with the mask")
    return chosen


def _measure_revisions(
    revisions: Sequence[Revision], measure: MeasureFn, *, device: str, dtype: str, drop_duplicates: bool,
    allow_pickle: bool,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """Each revision's entry (name, path, step, weights hash, duplicate_of, measurements), the skipped
    revisions, and the layer labels."""
    results: list[dict[str, Any]] = []
    by_hash: dict[str, dict[str, Any]] = {}
    skipped: list[dict[str, Any]] = []
    labels: list[str] = []
    for index, revision in enumerate(revisions, 1):
        log.info("revision %s (step %d, %d/%d)", revision.name, revision.step, index, len(revisions))
        model: Any = None
        if revision.kind == "lightning":
            digest = weights_sha256(load_checkpoint(revision.path, allow_pickle)["state_dict"])
        else:
            model = load_hf(revision.path, device, dtype)
            digest = weights_sha256(model.state_dict())
        entry: dict[str, Any] = {"name": revision.name, "path": str(revision.path), "step": revision.step,
                                 "weights_sha256": digest, "duplicate_of": None}
        if results and results[-1]["step"] == revision.step:
            # the same step twice: a Lightning `last.ckpt` beside its numbered copy is harmless
            if digest == results[-1]["weights_sha256"]:
                skipped.append({"name": revision.name, "step": revision.step,
                                "reason": f"same step and weights as {results[-1]['name']}"})
                continue
            raise ValueError(f"{results[-1]['name']} and {revision.name} are both at step {revision.step} but hold "
                             "different weights (two runs in one folder?); pass the files of one run")
        earlier = by_hash.get(digest)
        if earlier is not None:
            entry["duplicate_of"] = earlier["name"]
            if drop_duplicates:
                skipped.append({"name": revision.name, "step": revision.step,
                                "reason": f"identical weights to {earlier['name']} (dropped)"})
                continue
            measured = earlier["_measured"]
        else:
            measured, labels = measure(revision, model)
        del model
        entry.update({"_measured": measured, "acc": measured.acc, "logprob": measured.logprob,
                      "rankme": dict(measured.rankme), "probe_acc": dict(measured.probe_acc)})
        by_hash.setdefault(digest, entry)
        results.append(entry)
    return results, skipped, labels


def _offline_summary(
    results: Sequence[Mapping[str, Any]], labels: Sequence[str], *, kind: str, record: RecordedSetup, probe: ProbeSet,
    settings: DetectionSettings, selector: Selector, monitor: str, logprob_monitor: str | None,
    warn: WarningLog,
) -> dict[str, Any]:
    """The summary from the revisions' measurements, through the live run's builder, with the alerts a live
    run would have raised. ``steps`` is the live summary's when it is at least the last revision's step (the
    run went on after its last checkpoint), else the last revision's step."""
    steps = [int(r["step"]) for r in results]
    series: dict[str, list[list[float]]] = {}
    for prefix, key in ((RANKME_PREFIX, "rankme"), (PROBE_PREFIX, "probe_acc")):
        for label in labels:
            points = [[r["step"], r[key][label]] for r in results
                      if label in r[key] and math.isfinite(r[key][label])]
            if points:  # as live: a measure never taken has no series
                series[f"{prefix}{label}"] = points
    logprob = [[r["step"], r["logprob"]] for r in results if math.isfinite(r["logprob"])]
    # what a checkpoint cannot tell (the training loss, the learning rate, per-token scores): the live record's
    recorded = (record.run.summary.get("series") or {}) if record.run is not None else {}
    measured_here = {"acc", logprob_monitor or "logprob", *series}
    series.update({tag: points for tag, points in recorded.items()
                   if tag not in measured_here and not tag.startswith((RANKME_PREFIX, PROBE_PREFIX))})
    monitor_name = monitor if kind == "lightning" else "probe_set/acc"
    logprob_key = (logprob_monitor or "logprob") if kind == "lightning" else "probe_set/logprob"
    # the live run's tracker, fed one evaluation at a time: the same rules, alerts and summary as live
    tracker = RunTracker(settings=settings, run_info=_run_info(record, probe, warn), monitor=monitor_name,
                         logprob_key=logprob_key, rankme_prefix=RANKME_PREFIX)
    measured = {tag: points for tag, points in series.items() if tag.startswith((RANKME_PREFIX, PROBE_PREFIX))}
    scalars = {tag: {int(p[0]): p[1] for p in points} for tag, points in
               {logprob_key: logprob, **{t: p for t, p in series.items() if t not in measured}}.items()}
    for entry in results:
        step = int(entry["step"])
        update = tracker.update(step, float(entry["acc"]),
                                {tag: values[step] for tag, values in scalars.items() if step in values},
                                {tag: [p for p in points if p[0] <= step] for tag, points in measured.items()})
        for alert in update.alerts:
            warn(f"alert:{alert.kind}:{alert.layer}", alert_message(alert, monitor_name))
    rows: dict[str, int] = {}
    for entry in results:
        rows.update(entry["_measured"].rows)
    selectors = {RANKME_PREFIX.rstrip("/"): selector_name(selector)}
    if any(tag.startswith(PROBE_PREFIX) for tag in rows):
        selectors[PROBE_PREFIX.rstrip("/")] = "answer"
    parameters = next((r["_measured"].parameters for r in reversed(results) if r["_measured"].parameters), 0)
    last_step = steps[-1] if steps else 0
    return tracker.summary(measured, parameters=parameters, rows=rows, selectors=selectors,
                           steps=record.steps if record.steps is not None and record.steps >= last_step else last_step)


def _run_info(record: RecordedSetup, probe: ProbeSet, warn: WarningLog) -> dict[str, Any]:
    """The run's fields: those of the probe datamodule (task, difficulty, seed, task_params) and the module's
    hyperparameters (size), overridden by the live summary's when the run folder has one (they describe the
    run; ``analysis["probe_set"]`` describes what it was measured on)."""
    kwargs = probe.description.get("kwargs", {})
    info = {key: kwargs[key] for key in ("task", "difficulty", "seed") if kwargs.get(key) is not None}
    if "params" in kwargs:
        info["task_params"] = kwargs["params"]
    if "size" in record.hyper_parameters:
        info["size"] = record.hyper_parameters["size"]
    for key in ("task", "difficulty"):
        if key in info and key in record.run_info and info[key] != record.run_info[key]:
            warn(f"probe-{key}", f"the probe set's {key} is {info[key]!r} but the run trained on "
                 f"{record.run_info[key]!r}")
    return {**info, **record.run_info}
