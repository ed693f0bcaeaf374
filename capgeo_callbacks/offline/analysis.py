"""Offline analysis: the saved revisions of one model measured again and fed through a run session.

Each revision is measured on a fixed probe set (Lightning checkpoints by their own ``validation_step`` inside
``Trainer.validate`` with the watched layers' rows captured, Hugging Face folders with ``output_hidden_states``);
revisions with identical weights are flagged. The series go through the run session the live run kept in its
last checkpoint (its rules, settings and run info: :class:`~capgeo_callbacks.run.session.RunSession`), one
evaluation at a time, so that analysing a run's checkpoints gives the live run's alerts, forecasts, verdict and
summary. The summary has the keys of ``capgeo_summary.json`` (docs/design.md, "Summary") plus ``revisions``,
``skipped_revisions``, ``duplicate_weights``, ``warnings`` and ``analysis`` (how it was measured).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from capgeo_callbacks.capture.layers import DEFAULT_LAYERS
from capgeo_callbacks.capture.measuring import Measured
from capgeo_callbacks.capture.selectors import ANSWER_SELECTORS, SELECTORS, Selector, selector_name, validate_selector
from capgeo_callbacks.capture.unit import HiddenStateUnit, ProbeUnit, RankMeUnit
from capgeo_callbacks.detection import DetectionSettings
from capgeo_callbacks.integrations.hf_models import HF_NOTE, load_hf, probe_pass, scores_answers
from capgeo_callbacks.keys import ILDR, LOGPROB, PROBE_ACC, RANKME, VAL_ACC
from capgeo_callbacks.offline.measure_lightning import (
    RowSpec,
    hidden_state_monitors,
    load_module,
    measure_lightning,
    resolve_module_class,
)
from capgeo_callbacks.offline.probe_sets import ProbeSet, build_probe_set
from capgeo_callbacks.offline.recorded import RecordedSetup, read_record
from capgeo_callbacks.offline.revisions import (
    Revision,
    duplicate_groups,
    find_revisions,
    load_checkpoint,
    weights_sha256,
)
from capgeo_callbacks.rules.base import RENAMED_CLASSES
from capgeo_callbacks.rules.geometry import RankMeRecoveryRule
from capgeo_callbacks.run.failures import WarnOnce
from capgeo_callbacks.run.session import Measurements, RunSession
from capgeo_callbacks.run.summary import OFFLINE_SUMMARY_FILENAME, json_safe

__all__ = ["DEFAULT_NUM_ROWS", "analyze"]

log = logging.getLogger("capgeo.analyze")
DEFAULT_NUM_ROWS = 2048
RANKME_RECOVERY_RULE = f"{RankMeRecoveryRule.__module__}.{RankMeRecoveryRule.__qualname__}"

MeasureFn = Callable[[Revision, Any, int], tuple[Measured, list[str]]]
"""``measure(revision, hf_model_or_None, evaluation) -> (measurements, layer labels)``."""


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
    probes: bool | None = None,
    batch_size: int = 256,
    device: str = "cpu",
    dtype: str = "float32",
    monitor: str | None = None,
    mask_key: str | None = None,
    drop_duplicates: bool = False,
    allow_pickle: bool = False,
    settings: DetectionSettings | None = None,
    output: str | Path | None = None,
) -> dict[str, Any]:
    """Per-layer RankMe, probes and the run's rules over saved revisions, as a run summary.

    Args:
        paths: ``.ckpt`` files, folders of them (or run folders with ``checkpoints/``), Hugging Face model
            folders, or folders of revision subfolders (``step1000/``...).
        probe_file: a ``torch.save``'d dict with ``input_ids`` (N x T) and optionally ``answer_mask``,
            ``targets``, ``attention_mask``; replaces the datamodule probe set.
        task: task name for the datamodule factory (default: what the run records).
        difficulty: difficulty for the datamodule factory (likewise).
        seed: datamodule seed (likewise; else the factory's default).
        datamodule_factory: dotted path of a callable ``(task=..., difficulty=..., **kwargs)`` returning a
            datamodule (or anything with ``val_dataloader()``); resolved at run time (default: the one the run
            records as ``datamodule_factory``; ``train.py`` records its own).
        datamodule_kwargs: more factory arguments (e.g. ``{"val_size": 256}``); they override recorded ones.
        split: ``"val"`` or ``"test"``: which loader of the datamodule is the probe set.
        module_class: dotted path of the LightningModule class of ``.ckpt`` files (default: recorded in
            the checkpoint as ``checkpoint["capgeo"]["module_class"]`` or the hparams' ``_class_path``).
        module_kwargs: overrides passed to ``load_from_checkpoint``.
        selector: RankMe's token rows (one of :data:`~capgeo_callbacks.capture.selectors.SELECTORS` or a
            callable; default: the live RankMe monitor's, else ``answer`` with an answer mask, else ``last``).
        num_rows: RankMe rows per layer (default: the live monitor's, else 2048).
        layers: module names or globs to watch (``.ckpt``: over ``named_modules()``, default the live
            monitor's patterns, else ``**.blocks.*``, ``**.norm_f``; Hugging Face: globs over the labels
            ``embed``, ``layers.*``, default all).
        probes: also held-out linear probe accuracy per layer (default: where the live run had a probe monitor,
            at the evaluations it measured at).
        batch_size: batch size over a probe file.
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: Hugging Face weights dtype (``float32``, ``bfloat16``, ``float16`` or ``auto``).
        monitor: accuracy key the LightningModule logs (default: the live run's, else ``val/acc``); Hugging Face
            models are scored by exact match of the answer when the probe set has ``targets`` and the answer mask.
        mask_key: batch key of the answer mask (default: the live monitor's, else ``answer_mask``).
        drop_duplicates: leave out revisions whose weights equal an earlier revision's (default: keep them,
            with a warning, reusing the earlier values).
        allow_pickle: unpickle checkpoints fully (``weights_only=False``); only for files you trust.
        settings: detection settings (default: those the live run records, else the defaults);
            ``rankme-recovery`` uses them too.
        output: where the summary is written (None: not written).

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
    warn = WarnOnce(emit=log.warning)
    revisions = find_revisions(paths, allow_pickle=allow_pickle)
    kind = revisions[0].kind
    log.info("analysing %d %s revision(s): %s", len(revisions), kind, ", ".join(r.name for r in revisions))
    record = read_record(revisions, allow_pickle, warn)
    rankme_config = record.monitor
    mask = mask_key or (rankme_config and rankme_config.mask_key) or "answer_mask"
    probe = build_probe_set(probe_file_path=probe_file, recorded=record.datamodule, sources=record.sources,
                            task=task, difficulty=difficulty, seed=seed,
                            factory=datamodule_factory or record.datamodule_factory, factory_kwargs=datamodule_kwargs,
                            split=split, batch_size=batch_size, kind=kind, warn=warn)
    chosen = _choose_selector(selector, record, probe, mask, warn)
    rows_per_layer = num_rows or (rankme_config and rankme_config.num_rows) or DEFAULT_NUM_ROWS
    watch: list[str] | None = list(layers) if layers else None
    session = _session(record, kind, monitor, settings, probe, warn)
    # the live run's evaluation steps, where its checkpoint kept its record
    live_steps = [int(p[0]) for p in ((record.session or {}).get("record") or {}).get("acc", [])]
    probe_spec, every = _probe_spec(record, probes, kind, chosen, probe, mask, rows_per_layer, warn)

    if kind == "lightning":
        cls = resolve_module_class(module_class, record.module_class, revisions[0].path)
        watch = watch or (list(rankme_config.layers) if rankme_config else list(DEFAULT_LAYERS))
        eps = (rankme_config.setting if rankme_config else None) or 1e-7

    def measure(revision: Revision, model: Any, evaluation: int) -> tuple[Measured, list[str]]:
        probe_now = probe_spec if probe_spec is not None and evaluation % every == 0 else None
        if kind == "lightning":
            module = load_module(cls, revision.path, module_kwargs, allow_pickle)
            monitors = hidden_state_monitors(watch, RowSpec(chosen, rows_per_layer, eps), probe_now, mask_key=mask,
                                             target_key=(record.probes and record.probes.target_key) or "targets",
                                             warn=warn)
            return measure_lightning(module, probe, monitors, device=device)
        return _hf_revision(model, probe, watch, chosen, rows_per_layer, probe_now is not None, device, mask, warn)

    results, skipped, labels = _measure_revisions(revisions, measure, live_steps, device=device, dtype=dtype,
                                                  drop_duplicates=drop_duplicates, allow_pickle=allow_pickle)
    duplicates = duplicate_groups(results)
    for group in duplicates:
        digest = group["weights_sha256"]
        warn(f"dup:{digest}", f"revisions {', '.join(group['revisions'])} hold identical weights (sha256 "
             f"{digest[:12]}...): their RankMe is the same by construction, so a flat stretch there is not geometry")
    measured = _feed(session, results, labels or (list(results[0]["rankme"]) if results else []), record,
                     chosen, probe_spec)
    monitor_name, logprob_key = session.monitor, session.keys.logprob_key
    steps = max([int(r["step"]) for r in results[-1:]] + live_steps[-1:] + [record.steps or 0])
    analysis = {
        "source": "offline", "model_kind": kind, "selector": selector_name(chosen), "num_rows": rows_per_layer,
        "probe_set": probe.description, "layers": labels, "watched": watch, "acc": monitor_name,
        "recorded": {"summary": str(record.summary_path) if record.summary_path else None,
                     "monitor": rankme_config.source if rankme_config else None,
                     "session": record.session is not None,
                     "settings": "given" if settings else ("run" if record.settings else "default")},
        **({"layer_note": HF_NOTE} if kind == "hf" else {}),
    }
    entries = [{"name": r["name"], "path": r["path"], "step": r["step"], "weights_sha256": r["weights_sha256"],
                "duplicate_of": r["duplicate_of"], "acc": r["_measured"].scalars.get(monitor_name, math.nan),
                "logprob": r["_measured"].scalars.get(logprob_key or LOGPROB, math.nan),
                "rankme": dict(r["_measured"].rankme), "ildr": dict(r["_measured"].ildr),
                "probe_acc": dict(r["_measured"].probe_acc)} for r in results]
    extra = {"revisions": entries, "skipped_revisions": skipped, "duplicate_weights": duplicates,
             "warnings": warn.messages, "analysis": analysis}
    output = Path(output) if output is not None else None
    summary = session.finish(measured, steps, directory=None if output is None else output.parent,
                             filename=OFFLINE_SUMMARY_FILENAME if output is None else output.name, extra=extra,
                             figures=False)
    return json_safe(summary)


def _hf_revision(model: Any, probe: ProbeSet, layers: Sequence[str] | None, selector: Selector, num_rows: int,
                probes: bool, device: str, mask_key: str, warn: WarnOnce) -> tuple[Measured, list[str]]:
    """A Hugging Face revision measured by the units the live callback drives, on one pass over the probe set."""
    score = scores_answers(probe.keys, mask_key)
    if probes and not score:
        warn("probes-hf", "probe accuracy needs targets in the probe set ('labels', or 'targets' + "
             f"{mask_key!r}) and the 'target' or 'answer' selector; probes are left out")
    units: list[HiddenStateUnit] = [RankMeUnit(selector, num_rows, mask_key=mask_key, warn=warn)]
    if probes and score and num_rows >= ProbeUnit.min_rows:
        units.append(ProbeUnit(selector, num_rows, mask_key=mask_key, warn=warn))
    scalars, labels = probe_pass(model, probe.loader, units, layers=layers, device=device, mask_key=mask_key,
                                 score=score, warn=warn)
    result = Measured(rankme=dict.fromkeys(labels, math.nan), scalars=scalars,
                      parameters=sum(p.numel() for p in model.parameters()))
    for unit in units:
        computed = unit.compute()
        result.add(computed.values)
        result.rows.update(computed.rows)
        result.left_out.update(unit.left_out)
    return result, labels


def _session(record: RecordedSetup, kind: str, monitor: str | None, settings: DetectionSettings | None,
             probe: ProbeSet, warn: WarnOnce) -> RunSession:
    """The live run's session as its checkpoint kept it (with ``settings``, if given, for the detection and
    ``rankme-recovery``), or, for a run that kept none, one with ``rankme-recovery`` on the recorded or default
    settings."""
    keys = {"monitor": monitor} if monitor else {}
    if record.session is not None:
        state = dict(record.session)
        if settings is not None:
            state["settings"] = settings.to_dict()
            state["rules"] = [{**rule, "settings": {**rule["settings"], "detection": settings.to_dict()}}
                              if RENAMED_CLASSES.get(rule.get("class"), rule.get("class")) == RANKME_RECOVERY_RULE
                              else rule for rule in state.get("rules", [])]
        return RunSession.from_state(state, warn=warn, **keys)
    chosen = settings or record.settings or DetectionSettings()
    return RunSession(settings=chosen, run_info=_run_info(record, probe, warn), monitor=monitor or VAL_ACC,
                      warn=warn)


def _probe_spec(record: RecordedSetup, probes: bool | None, kind: str, selector: Selector, probe: ProbeSet,
                mask: str, num_rows: int, warn: WarnOnce) -> tuple[RowSpec | None, int]:
    """How probes are measured (None: not measured) and at which evaluations (every n-th): as the live probe
    monitor did, unless ``probes`` says otherwise."""
    config = record.probes
    wanted = probes if probes is not None else config is not None
    if not wanted:
        return None, 1
    probe_selector = (config and config.selector) or "answer"
    labelled = probe_selector == "target" or not probe.keys or mask in probe.keys  # "target": found in the batch
    if kind == "lightning" and probe_selector not in ("answer", "target"):  # labels_fn is code: not recorded
        warn("probes", f"the live probe monitor took its labels from labels_fn with selector {probe_selector!r}, which "
             "offline analysis cannot rebuild; probes are skipped")
        return None, 1
    if kind == "hf" and selector not in ("answer", "target") or not labelled:
        warn("probes", f"probe accuracy needs labels: the live monitor's 'target' rows, or the answer tokens "
             f"({mask!r} in the probe set" + (" and the 'answer' selector" if kind == "hf" else "") + "); probes are "
             "skipped")
        return None, 1
    spec = RowSpec(probe_selector, (config and config.num_rows) or num_rows, (config and config.setting) or 1e-3)
    return spec, config.every_n_evals if config is not None and probes is None else 1


def _choose_selector(selector: Selector | None, record: RecordedSetup, probe: ProbeSet, mask_key: str,
                     warn: WarnOnce) -> Selector:
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
    revisions: Sequence[Revision], measure: MeasureFn, live_steps: Sequence[int], *, device: str, dtype: str,
    drop_duplicates: bool, allow_pickle: bool,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """Each revision's entry (name, path, step, weights hash, duplicate_of, measurements), the skipped
    revisions, and the layer labels. A revision's evaluation number is its place among the live run's
    evaluations where the run recorded them, else among the revisions."""
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
            evaluation = live_steps.index(revision.step) if revision.step in live_steps else len(results)
            measured, labels = measure(revision, model, evaluation)
        del model
        entry["_measured"] = measured
        by_hash.setdefault(digest, entry)
        results.append(entry)
    return results, skipped, labels


def _feed(session: RunSession, results: Sequence[Mapping[str, Any]], labels: Sequence[str],
          record: RecordedSetup, selector: Selector, probe_spec: RowSpec | None) -> Measurements:
    """Each revision fed to ``session`` as an evaluation: the accuracy and the module's other validation scalars
    measured again, RankMe and probes measured again, and what a checkpoint cannot tell (the training loss, the
    learning rate) from the live record. Returns the whole measurements."""
    series: dict[str, list[list[float]]] = {}
    for prefix, key in ((RANKME, "rankme"), (ILDR, "ildr"), (PROBE_ACC, "probe_acc")):
        for label in labels:
            points = [[r["step"], getattr(r["_measured"], key)[label]] for r in results
                      if label in getattr(r["_measured"], key) and math.isfinite(getattr(r["_measured"], key)[label])]
            if points:  # as live: a measure never taken has no series
                series[f"{prefix}{label}"] = points
    measured_tags = {tag for r in results for tag in r["_measured"].scalars}
    carried = {tag: {int(p[0]): p[1] for p in points} for tag, points in _recorded_scalars(record).items()
               if tag not in measured_tags and tag != session.monitor}
    prefixes = tuple((record.session or {}).get("record_prefixes") or ("val/",))
    for entry in results:
        step, scalars = int(entry["step"]), entry["_measured"].scalars
        acc = scalars.get(session.monitor, math.nan)
        if session.monitor not in scalars:
            session.warn("monitor", f"the module logged no {session.monitor!r} (logged: "
                         f"{', '.join(sorted(scalars)) or 'nothing'}); acquisition cannot be detected (pass --monitor)")
        now = {tag: value for tag, value in scalars.items() if tag != session.monitor and tag.startswith(prefixes)}
        now.update({tag: values[step] for tag, values in carried.items() if step in values})
        session.evaluate(step, acc, now, Measurements({tag: [p for p in points if p[0] <= step]
                                                      for tag, points in series.items()}))
    rows: dict[str, int] = {}
    left_out: dict[str, str] = {}
    for entry in results:
        rows.update(entry["_measured"].rows)
        left_out.update(entry["_measured"].left_out)
    selectors = {RANKME[:-1]: selector_name(selector)}
    if any(tag.startswith(PROBE_ACC) for tag in rows) and probe_spec is not None:
        selectors[PROBE_ACC[:-1]] = selector_name(probe_spec.selector)
    parameters = next((r["_measured"].parameters for r in reversed(results) if r["_measured"].parameters), None)
    return Measurements(series, rows, selectors, session.run_info.get("parameters", parameters), left_out)


def _recorded_scalars(record: RecordedSetup) -> dict[str, list[list[float]]]:
    """The scalars the live run recorded (from its session in the checkpoint, else its summary's series)."""
    if record.session is not None:
        return dict((record.session.get("record") or {}).get("scalars") or {})
    series = (record.run.summary.get("series") or {}) if record.run is not None else {}
    measured = (RANKME, ILDR, PROBE_ACC)
    return {tag: points for tag, points in series.items() if tag != "acc" and not tag.startswith(measured)}


def _run_info(record: RecordedSetup, probe: ProbeSet, warn: WarnOnce) -> dict[str, Any]:
    """The run's fields: those of the probe datamodule (task, difficulty, seed, task_params) and the module's
    hyperparameters (size), overridden by the live run's when it recorded them (they describe the run;
    ``analysis["probe_set"]`` describes what it was measured on)."""
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
