r"""Offline analysis
================

Per-layer RankMe over a series of saved checkpoints, with the same measures and detection as the live
callbacks (spec §6.1, §7, §8)::

    python -m capgeo_callbacks.analyze runs/mod-hard-xs-s0/version_0
    python -m capgeo_callbacks.analyze pythia-70m/ --probe-file rows.pt --selector last

Two kinds of revision series are read:

- Lightning ``.ckpt`` files (a file, a folder of them, or a run folder with ``checkpoints/``), ordered
  by their ``global_step``. Each is loaded with ``load_from_checkpoint`` of the LightningModule class
  named by ``--module-class`` (a dotted path resolved at run time, default: the class the checkpoint
  records) and validated by a Lightning ``Trainer`` with :class:`~capgeo_callbacks.RankMeMonitor`
  (and :class:`~capgeo_callbacks.LinearProbeMonitor` with ``--probes``) attached: the same code, rows
  and layer names as the live run, plus the validation accuracy the module logs (``val/acc``).
- Hugging Face causal LMs saved with ``save_pretrained``, one revision per subfolder, ordered by the
  last number in the folder name (``step1000``, ``step2000``, ... as Pythia names its revisions). They
  are run with ``output_hidden_states=True``: ``hidden_states[0]`` is the token embeddings (labelled
  ``embed``) and ``hidden_states[i]`` the output of block ``i - 1`` (``layers.{i-1}``), except the
  last, which Hugging Face returns *after the final layer norm*: it is labelled
  ``layers.{L-1}+final_norm`` (hooking the final norm module gives the same tensor). The raw output of
  the last block is not in ``hidden_states`` and is not measured.

The probe set is fixed across revisions: ``--probe-file rows.pt`` (a dict with ``input_ids`` and
optionally ``answer_mask``, ``targets``, ``attention_mask``), or a task's validation set built by the
``--datamodule-factory`` (default ``tasks.make_datamodule``, resolved at run time) from ``--task``
and ``--difficulty`` or from what the checkpoint or run folder records. RankMe uses its first
``--num-rows`` selected rows, as the live monitor does.

Each revision's weights are hashed (sha256 over the state-dict tensors in sorted key order). Two
revisions with identical weights (public Pythia revisions contain such duplicates) are reported in
``duplicate_weights`` and with a logging warning: RankMe cannot change between them, so a flat stretch
there says nothing about geometry.

The output is a summary in the shape of ``capgeo_summary.json`` (detection results, per-layer collapse,
verdict, series) plus ``revisions``, ``duplicate_weights``, ``warnings`` and ``analysis`` (how it was
measured), and a printed table.

Checkpoints are unpickled with ``weights_only=True`` unless ``allow_pickle`` is set (only for files you
trust).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import inspect
import json
import logging
import math
import pickle
import re
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from capgeo_callbacks.callbacks.linear_probe_monitor import LinearProbeMonitor
from capgeo_callbacks.callbacks.precursor_detector import MEASURE_TRANSITIONS, transition_kind
from capgeo_callbacks.callbacks.rankme_monitor import DEFAULT_LAYERS, RankMeMonitor
from capgeo_callbacks.detection import PrecursorTracker, detect_logprob_emergence, measure_transition
from capgeo_callbacks.layers import glob_match
from capgeo_callbacks.measures.probes import linear_probe_accuracy
from capgeo_callbacks.measures.rankme import rankme
from capgeo_callbacks.selectors import SELECTORS, Selector, SelectorError, select_rows, validate_selector

__all__ = [
    "DEFAULT_DATAMODULE_FACTORY",
    "Revision",
    "analyze",
    "find_revisions",
    "format_report",
    "hf_layer_labels",
    "main",
    "resolve_dotted",
    "weights_sha256",
]

log = logging.getLogger("capgeo.analyze")

DEFAULT_DATAMODULE_FACTORY = "tasks.make_datamodule"
SUMMARY_FILENAME = "capgeo_offline_summary.json"
FINAL_NORM_SUFFIX = "+final_norm"
HF_NOTE = ("Hugging Face hidden_states: 'embed' is the token embeddings, 'layers.i' the output of block i; "
           "the last one, 'layers.{L-1}+final_norm', comes after the final layer norm (the raw output of the "
           "last block is not in hidden_states)")
_DETECTION_KEYS = ("threshold", "patience", "window", "min_drop", "recovery_fraction", "recovery_evals", "smoothing")
_STEP = re.compile(r"(?:step|checkpoint|ckpt|iter)[-_=]?(\d+)", re.IGNORECASE)  # step1000, checkpoint-500
_NUMBER = re.compile(r"(\d+)(?!.*\d)")  # else the last number in a name


# -- revisions ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Revision:
    """One saved revision of a model.

    Attributes:
        name: file or folder name (``last.ckpt``, ``step1000``).
        path: where it is.
        kind: ``"lightning"`` (a ``.ckpt`` file) or ``"hf"`` (a ``save_pretrained`` folder).
        step: its training step (``global_step`` of a checkpoint, the number in an HF folder's name).
    """

    name: str
    path: Path
    kind: str
    step: int


def find_revisions(paths: str | Path | Sequence[str | Path], allow_pickle: bool = False) -> list[Revision]:
    """The revisions under ``paths``, ordered by step (then name).

    Each path is a ``.ckpt`` file, a folder of them (or with a ``checkpoints/`` subfolder), a Hugging Face
    model folder (with ``config.json``), or a folder of such folders named with their step
    (``step1000/``). Steps of checkpoints come from their ``global_step``.

    Raises:
        FileNotFoundError: if a path does not exist or holds no revision.
        ValueError: if Lightning checkpoints and Hugging Face folders are mixed, or an HF folder name has
            no number to order it by.
    """
    given = [paths] if isinstance(paths, (str, Path)) else list(paths)
    found: list[Revision] = []
    for raw in given:
        path = Path(raw)
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist")
        found += _revisions_in(path, allow_pickle)
    if not found:
        raise FileNotFoundError(f"no .ckpt files or Hugging Face model folders under {', '.join(map(str, given))}")
    kinds = {r.kind for r in found}
    if len(kinds) > 1:
        raise ValueError("found both Lightning checkpoints and Hugging Face folders; analyse one kind at a time: "
                         + ", ".join(f"{r.name} ({r.kind})" for r in found[:6]))
    unique = {r.path.resolve(): r for r in found}  # a path given twice counts once
    return sorted(unique.values(), key=lambda r: (r.step, r.name.startswith("last"), r.name))


def _revisions_in(path: Path, allow_pickle: bool) -> list[Revision]:
    if path.is_file():
        if path.suffix != ".ckpt":
            raise ValueError(f"{path} is not a Lightning .ckpt file or a folder")
        return [Revision(path.name, path, "lightning", _checkpoint_step(path, allow_pickle))]
    ckpts = sorted(path.glob("*.ckpt")) or sorted(path.glob("checkpoints/*.ckpt"))
    if ckpts:
        return [Revision(p.name, p, "lightning", _checkpoint_step(p, allow_pickle)) for p in ckpts]
    if (path / "config.json").is_file():  # a single HF model folder
        match = _STEP.search(path.name)  # "pythia-70m" is not step 70
        return [Revision(path.name, path, "hf", int(match.group(1)) if match else 0)]
    subfolders = sorted(p for p in path.iterdir() if p.is_dir() and (p / "config.json").is_file())
    return [Revision(p.name, p, "hf", _step_from_name(p.name)) for p in subfolders]


def _step_from_name(name: str) -> int:
    """The step in a revision folder's name: after ``step``/``checkpoint``/``iter``, else its last number."""
    match = _STEP.search(name) or _NUMBER.search(name)
    if match is None:
        raise ValueError(f"cannot order revision folder {name!r}: its name has no step number (e.g. step1000)")
    return int(match.group(1))


def _load_checkpoint(path: Path, allow_pickle: bool) -> dict[str, Any]:
    """A Lightning checkpoint dict, memory-mapped where possible (only the parts read are paged in)."""
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=not allow_pickle, mmap=True)
        except RuntimeError as err:  # not a zip archive (legacy format): no mmap
            if "mmap" not in str(err) and "zip" not in str(err):
                raise
            return torch.load(path, map_location="cpu", weights_only=not allow_pickle)
    except pickle.UnpicklingError as err:
        if allow_pickle:
            raise
        raise ValueError(f"{path} holds objects that weights_only loading refuses ({type(err).__name__}); if you "
                         "trust the file, pass --allow-pickle (allow_pickle=True)") from err


def _checkpoint_step(path: Path, allow_pickle: bool) -> int:
    checkpoint = _load_checkpoint(path, allow_pickle)
    if "global_step" in checkpoint:
        return int(checkpoint["global_step"])
    match = re.search(r"step=(\d+)", path.name)
    if match is None:
        raise ValueError(f"{path} records no global_step and its name has no 'step=N'")
    return int(match.group(1))


def weights_sha256(state_dict: Mapping[str, Tensor]) -> str:
    """sha256 over a state dict: each key, dtype, shape and the raw bytes of its tensor, in sorted key order.

    Two revisions with the same digest hold bit-identical weights.
    """
    digest = hashlib.sha256()
    for key in sorted(state_dict):
        value = state_dict[key]
        if not isinstance(value, Tensor):
            continue
        tensor = value.detach().to("cpu").contiguous()
        digest.update(f"{key}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        # viewed as bytes, so every dtype (bfloat16 too) hashes without a numpy conversion
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


# -- dotted paths ------------------------------------------------------------------------------------
def resolve_dotted(path: str) -> Any:
    """The object named by a dotted path (``models.CapabilityModule``, or ``models:CapabilityModule``).

    Resolved at run time with importlib, so that capgeo_callbacks never imports ``tasks`` or ``models``.

    Raises:
        ValueError: if the path does not name an importable object (the message says which part failed).
    """
    if ":" in path:
        module_name, attrs = path.split(":", 1)
        candidates = [(module_name, attrs.split("."))]
    else:
        parts = path.split(".")
        candidates = [(".".join(parts[:i]), parts[i:]) for i in range(len(parts) - 1, 0, -1)]
    if not candidates or not all(candidates[0]):
        raise ValueError(f"{path!r} is not a dotted path like package.module.Name")
    for module_name, attrs in candidates:
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            # only a missing module on the path itself means "try a shorter module"; a missing
            # dependency inside it is a real error
            if err.name is None or not (module_name == err.name or module_name.startswith(err.name + ".")):
                raise
            continue
        for attr in attrs:
            if not hasattr(obj, attr):
                public = sorted(n for n in dir(obj) if not n.startswith("_"))[:12]
                raise ValueError(f"cannot resolve {path!r}: {obj.__name__!r} has no attribute {attr!r}; "
                                 f"it has: {', '.join(public)}")
            obj = getattr(obj, attr)
        return obj
    raise ValueError(f"cannot import any module of {path!r} (run from the project root, or install the package "
                     "that provides it)")


# -- probe sets --------------------------------------------------------------------------------------
class _Rows(Dataset):
    """A dict of equal-length tensors, indexable one row at a time."""

    def __init__(self, rows: Mapping[str, Tensor]) -> None:
        self.rows = dict(rows)

    def __len__(self) -> int:
        return self.rows["input_ids"].shape[0]

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return {key: value[i] for key, value in self.rows.items()}


@dataclass
class _ProbeSet:
    """The fixed rows every revision is measured on: a loader factory and how it was made."""

    loader: DataLoader
    description: dict[str, Any]
    keys: set[str] = field(default_factory=set)


def _probe_file(path: str | Path, batch_size: int) -> _ProbeSet:
    rows = torch.load(Path(path), map_location="cpu", weights_only=True)
    if not isinstance(rows, Mapping) or "input_ids" not in rows:
        raise ValueError(f"probe file {path} must hold a dict with 'input_ids' (N x T integer tensor), "
                         f"optionally 'answer_mask', 'targets', 'attention_mask'; got "
                         f"{sorted(rows) if isinstance(rows, Mapping) else type(rows).__name__}")
    ids = rows["input_ids"]
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.dtype.is_floating_point:
        raise ValueError(f"probe file {path}: 'input_ids' must be an N x T integer tensor, got "
                         f"{getattr(ids, 'dtype', type(ids).__name__)} of shape {tuple(getattr(ids, 'shape', ()))}")
    tensors = {k: v for k, v in rows.items() if isinstance(v, Tensor)}
    bad = [k for k, v in tensors.items() if v.shape[:1] != ids.shape[:1]]
    if bad:
        raise ValueError(f"probe file {path}: {', '.join(bad)} must have {ids.shape[0]} rows like input_ids")
    loader = DataLoader(_Rows(tensors), batch_size=batch_size, shuffle=False)
    description = {"source": "file", "path": str(path), "examples": int(ids.shape[0]), "keys": sorted(tensors)}
    return _ProbeSet(loader, description, set(tensors))


def _probe_datamodule(factory_path: str, kwargs: Mapping[str, Any], split: str, notes: list[str]) -> _ProbeSet:
    factory = resolve_dotted(factory_path)
    try:
        datamodule = factory(**kwargs)
    except TypeError as err:  # a recorded or given argument this factory does not take
        raise ValueError(f"{factory_path}(**{dict(kwargs)}) failed: {err}") from err
    if isinstance(datamodule, pl.LightningDataModule):
        datamodule.prepare_data()
        datamodule.setup("validate" if split == "val" else "test")
    loader = datamodule.val_dataloader() if split == "val" else datamodule.test_dataloader()
    if isinstance(loader, (list, tuple)):  # several loaders: the live monitors read only the first
        loader = loader[0]
    first = next(iter(loader), None)
    if first is None:
        raise ValueError(f"the {split} loader of {factory_path}(**{dict(kwargs)}) is empty")
    keys = set(first) if isinstance(first, Mapping) else set()
    description = {"source": "datamodule", "factory": factory_path, "kwargs": dict(kwargs), "split": split,
                   "keys": sorted(keys), "notes": notes}
    dataset = getattr(loader, "dataset", None)
    if dataset is not None and hasattr(dataset, "__len__"):
        description["examples"] = len(dataset)
    return _ProbeSet(loader, description, keys)


# -- what a checkpoint records -----------------------------------------------------------------------
def _recorded_module_class(checkpoint: Mapping[str, Any]) -> str | None:
    capgeo = checkpoint.get("capgeo") or {}
    if isinstance(capgeo, Mapping) and capgeo.get("module_class"):
        return str(capgeo["module_class"])
    hparams = checkpoint.get("hyper_parameters") or {}
    return str(hparams["_class_path"]) if isinstance(hparams, Mapping) and hparams.get("_class_path") else None


def _recorded_layers(checkpoint: Mapping[str, Any]) -> list[str] | None:
    """The layer patterns of the live RankMeMonitor, read from its callback state key."""
    for key in checkpoint.get("callbacks", {}) or {}:
        if not (isinstance(key, str) and key.startswith("RankMeMonitor{")):
            continue
        try:
            info = ast.literal_eval(key[len("RankMeMonitor"):])
        except (ValueError, SyntaxError):
            continue
        if isinstance(info, dict) and info.get("prefix", "rankme") == "rankme" and info.get("layers"):
            return [str(p) for p in info["layers"]]
    return None


def _recorded_datamodule(checkpoint: Mapping[str, Any], path: Path) -> tuple[dict[str, Any], list[str]]:
    """Datamodule arguments the checkpoint or its run folder records, and where they came from."""
    kwargs: dict[str, Any] = {}
    sources: list[str] = []
    for folder in (path.parent, path.parent.parent):
        summary_path = folder / "capgeo_summary.json"
        if summary_path.is_file():
            try:
                summary = json.loads(summary_path.read_text())
            except (OSError, json.JSONDecodeError):
                break
            for key in ("task", "difficulty", "seed"):
                if summary.get(key) is not None:
                    kwargs[key] = summary[key]
            if isinstance(summary.get("task_params"), Mapping):
                kwargs["params"] = dict(summary["task_params"])
            if isinstance(summary.get("datamodule"), Mapping):
                kwargs.update(summary["datamodule"])
            sources.append(str(summary_path))
            break
    capgeo = checkpoint.get("capgeo") or {}
    if isinstance(capgeo, Mapping) and isinstance(capgeo.get("datamodule"), Mapping):
        kwargs.update(capgeo["datamodule"])
        sources.append("checkpoint['capgeo']['datamodule']")
    hparams = checkpoint.get("datamodule_hyper_parameters")
    if isinstance(hparams, Mapping):
        kwargs.update(dict(hparams))
        sources.append("checkpoint['datamodule_hyper_parameters']")
    return kwargs, sources


# -- measuring one revision --------------------------------------------------------------------------
@dataclass
class _Measured:
    """What one revision gave: RankMe and probe accuracy per layer, accuracy, log-prob, rows used."""

    rankme: dict[str, float]
    probe_acc: dict[str, float] = field(default_factory=dict)
    acc: float = math.nan
    logprob: float = math.nan
    rows: dict[str, int] = field(default_factory=dict)
    parameters: int = 0


class _Warnings:
    """Warnings logged once each and kept for the summary."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self._keys: set[str] = set()

    def __call__(self, key: str, message: str) -> None:
        if key in self._keys:
            return
        self._keys.add(key)
        self.messages.append(message)
        log.warning(message)


@contextmanager
def _quiet_lightning(warn: _Warnings) -> Iterator[None]:
    """Silence the per-Trainer banner and worker-count hint (they would repeat for every revision) and route
    the monitors' warnings (too few rows, a skipped layer) into the summary's warnings."""
    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            yield
    finally:
        logger.setLevel(level)
    for item in caught:
        if "capgeo_callbacks" in item.filename:
            warn(str(item.message), str(item.message))
        else:  # not ours: let it through as it came
            warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)


def _lightning_device(device: str) -> tuple[str, int | list[int]]:
    kind, _, index = device.partition(":")
    accelerator = {"cuda": "gpu"}.get(kind, kind)
    return accelerator, [int(index)] if index else 1


def _measure_lightning(
    module: pl.LightningModule, probe: _ProbeSet, *, layers: Sequence[str], selector: Selector, num_rows: int,
    probes: bool, device: str, monitor: str, logprob_monitor: str | None, warn: _Warnings,
) -> tuple[_Measured, list[str]]:
    """Validate ``module`` on the probe loader with the live monitors attached; their values are the result."""
    rankme_cb = RankMeMonitor(layers=layers, selector=selector, num_rows=num_rows)
    callbacks: list[pl.Callback] = [rankme_cb]
    probe_cb = None
    if probes:
        if selector == "answer":
            probe_cb = LinearProbeMonitor(layers=layers, num_rows=num_rows)
            callbacks.append(probe_cb)
        else:
            warn("probes-selector", f"probe accuracy needs the 'answer' selector (labels are the answer tokens); "
                 f"selector is {selector!r}, so probes are skipped")
    accelerator, devices = _lightning_device(device)
    with _quiet_lightning(warn):
        trainer = pl.Trainer(accelerator=accelerator, devices=devices, logger=False, callbacks=callbacks,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        try:
            trainer.validate(module, dataloaders=probe.loader, verbose=False)
        except (KeyError, TypeError, IndexError) as err:
            raise ValueError(f"{type(module).__name__}.validation_step failed on the probe batches "
                             f"({type(err).__name__}: {err}); the probe set has keys {sorted(probe.keys)}, and must "
                             "give what the module's validation_step reads") from err
    metrics = {key: float(value) for key, value in trainer.callback_metrics.items()}
    labels = [rankme_cb.layer_tags[name] for name in rankme_cb.layer_names]
    values = rankme_cb.values_at(trainer.global_step)
    result = _Measured(
        rankme={label: values.get(f"rankme/{label}", math.nan) for label in labels},
        acc=metrics.get(monitor, math.nan),
        logprob=metrics.get(logprob_monitor, math.nan) if logprob_monitor else math.nan,
        rows=dict(rankme_cb.rows_used),
        parameters=sum(p.numel() for p in module.parameters()),
    )
    if probe_cb is not None:
        probe_values = probe_cb.values_at(trainer.global_step)
        result.probe_acc = {label: probe_values.get(f"probe_acc/{label}", math.nan) for label in labels}
    if monitor not in metrics:
        warn("monitor", f"the module logged no {monitor!r} (logged: {', '.join(sorted(metrics)) or 'nothing'}); "
             "acquisition cannot be detected (pass --monitor)")
    return result, labels


def hf_layer_labels(num_hidden_states: int, num_layers: int) -> list[str]:
    """Labels of a Hugging Face model's ``hidden_states``: ``embed``, ``layers.0`` ...,
    ``layers.{L-1}+final_norm`` (the last hidden state comes after the final layer norm).

    With a count other than ``num_layers + 1`` the convention is unknown: ``hidden_states.{i}``.
    """
    if num_hidden_states != num_layers + 1:
        return [f"hidden_states.{i}" for i in range(num_hidden_states)]
    return ["embed", *[f"layers.{i}" for i in range(num_layers - 1)], f"layers.{num_layers - 1}{FINAL_NORM_SUFFIX}"]


def _measure_hf(
    model: torch.nn.Module, probe: _ProbeSet, *, layers: Sequence[str] | None, selector: Selector, num_rows: int,
    probes: bool, device: str, mask_key: str, warn: _Warnings,
) -> tuple[_Measured, list[str]]:
    """One pass over the probe rows with ``output_hidden_states=True``; rows captured as RankMeMonitor does."""
    num_layers = int(getattr(model.config, "num_hidden_layers", 0))
    vocab = int(getattr(model.config, "vocab_size", 0) or 0)
    score = {"targets", mask_key} <= probe.keys  # exact match and log-prob of the answer, like val/acc
    want_probes = probes and score and selector == "answer"
    if probes and not want_probes:
        warn("probes-hf", "probe accuracy needs the 'answer' selector and 'targets' + "
             f"{mask_key!r} in the probe set (labels are the answer tokens); probes are skipped")
    labels: list[str] | None = None
    keep: list[int] = []
    rows: dict[int, list[Tensor]] = {}
    counts: dict[int, int] = {}
    probe_labels: list[Tensor] = []
    label_count = 0
    correct = examples = tokens = 0
    logprob_sum = 0.0
    model.eval()
    with torch.inference_mode():
        for batch in probe.loader:
            if keep and all(counts[i] >= num_rows for i in keep) and not score:
                break  # rows complete and nothing else to score: skip the rest of the probe set
            input_ids = batch["input_ids"].to(device)
            if vocab and int(input_ids.max()) >= vocab:
                raise ValueError(f"probe token id {int(input_ids.max())} is outside the model's vocabulary "
                                 f"({vocab} tokens): the probe set does not fit this model")
            extra = {"attention_mask": batch["attention_mask"].to(device)} if "attention_mask" in batch else {}
            out = model(input_ids=input_ids, output_hidden_states=True, use_cache=False, **extra)
            hidden_states = out.hidden_states
            if labels is None:
                labels = hf_layer_labels(len(hidden_states), num_layers)
                if labels[0] != "embed":
                    warn("hf-labels", f"{type(model).__name__} returned {len(hidden_states)} hidden states for "
                         f"{num_layers} layers; they are labelled hidden_states.i")
                keep = [i for i, label in enumerate(labels)
                        if layers is None or any(glob_match(pattern, label) for pattern in layers)]
                if not keep:
                    raise ValueError(f"layer patterns {list(layers or [])} match none of {', '.join(labels)}")
                rows = {i: [] for i in keep}
                counts = dict.fromkeys(keep, 0)
            for i in keep:
                if counts[i] >= num_rows:
                    continue
                try:
                    selected = select_rows(hidden_states[i].detach(), batch, selector, mask_key)
                except SelectorError as err:
                    raise ValueError(f"{err} (probe set keys: {sorted(probe.keys)})") from err
                selected = selected[: num_rows - counts[i]].to(torch.float32, copy=True).cpu()
                rows[i].append(selected)
                counts[i] += selected.shape[0]
            if want_probes and label_count < num_rows:
                answers = batch["targets"][batch[mask_key].to(torch.bool)][: num_rows - label_count]
                probe_labels.append(answers.to(torch.long))
                label_count += answers.shape[0]
            if score:
                mask = batch[mask_key].to(device=device, dtype=torch.bool)
                targets = batch["targets"].to(device)
                logits = out.logits
                right = (logits.argmax(dim=-1) == targets) | ~mask
                correct += int(right.all(dim=1).sum())
                examples += int(mask.shape[0])
                log_probs = logits[mask].float().log_softmax(dim=-1)  # answer positions only: (n, V)
                logprob_sum += float(log_probs.gather(-1, targets[mask].unsqueeze(-1)).sum())
                tokens += int(mask.sum())
    if labels is None:
        raise ValueError("the probe set is empty")
    result = _Measured(rankme={}, parameters=sum(p.numel() for p in model.parameters()))
    if score and examples:
        result.acc = correct / examples
        result.logprob = logprob_sum / max(tokens, 1)
    y = torch.cat(probe_labels) if probe_labels else None
    for i in keep:
        label = labels[i]
        z = torch.cat(rows[i]) if rows[i] else torch.zeros(0, 0)
        result.rankme[label] = math.nan
        if z.shape[0] < 2:
            warn(f"empty:{label}", f"no rows captured for {label!r}; skipped")
            continue
        if z.shape[0] < num_rows:
            warn(f"few:{label}", f"{label!r} gave {z.shape[0]} rows, fewer than num_rows={num_rows}; RankMe is "
                 f"measured on {z.shape[0]} rows")
        try:
            result.rankme[label] = rankme(z)
        except ValueError as err:  # NaN/Inf or all-zero hidden states: skipped, never a wrong number
            warn(f"value:{label}", f"{label!r}: {err}; skipped")
            continue
        result.rows[label] = int(z.shape[0])
        if y is not None and y.shape[0] == z.shape[0] and z.shape[0] >= 4:
            half = z.shape[0] // 2
            try:
                result.probe_acc[label] = linear_probe_accuracy(z[:half], y[:half], z[half:], y[half:])
            except (ValueError, RuntimeError) as err:
                warn(f"probe:{label}", f"probe on {label!r}: {err}; skipped")
    return result, [labels[i] for i in keep]


def _import_transformers() -> Any:
    try:
        import transformers
    except ImportError as err:
        raise ImportError("analysing Hugging Face models needs transformers: pip install 'capgeo-callbacks[hf]' "
                          "(or pip install 'transformers>=4.40')") from err
    return transformers


def _load_hf(path: Path, device: str, dtype: str) -> torch.nn.Module:
    transformers = _import_transformers()
    kwargs: dict[str, Any] = {"local_files_only": True}  # never the hub: revisions are local folders
    version = tuple(int(p) for p in re.findall(r"\d+", transformers.__version__)[:2])
    # transformers 4.56 renamed torch_dtype to dtype
    kwargs["dtype" if version >= (4, 56) else "torch_dtype"] = dtype if dtype == "auto" else getattr(torch, dtype)
    hf_logging = transformers.utils.logging
    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a loading bar per revision drowns the table
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    return model.to(device).eval()


# -- the analysis ------------------------------------------------------------------------------------
def analyze(
    paths: str | Path | Sequence[str | Path],
    *,
    probe_file: str | Path | None = None,
    task: str | None = None,
    difficulty: str | None = None,
    seed: int | None = None,
    datamodule_factory: str = DEFAULT_DATAMODULE_FACTORY,
    datamodule_kwargs: Mapping[str, Any] | None = None,
    split: str = "val",
    module_class: str | None = None,
    module_kwargs: Mapping[str, Any] | None = None,
    selector: Selector | None = None,
    num_rows: int = 2048,
    layers: Sequence[str] | None = None,
    probes: bool = False,
    batch_size: int = 256,
    device: str = "cpu",
    dtype: str = "float32",
    monitor: str = "val/acc",
    logprob_monitor: str | None = "val/logprob",
    mask_key: str = "answer_mask",
    drop_duplicates: bool = False,
    allow_pickle: bool = False,
    detection: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Per-layer RankMe and detection over saved revisions (see the module docstring).

    Args:
        paths: ``.ckpt`` files, folders of them, Hugging Face model folders, or folders of revision
            subfolders (``step1000/``...).
        probe_file: a ``torch.save``'d dict with ``input_ids`` (N x T) and optionally ``answer_mask``,
            ``targets``, ``attention_mask``; replaces the datamodule probe set.
        task: task name for the datamodule factory (default: what the checkpoint or run folder records).
        difficulty: difficulty for the datamodule factory (likewise).
        seed: datamodule seed (likewise; else the factory's default).
        datamodule_factory: dotted path of a callable ``(task=..., difficulty=..., **kwargs)`` returning a
            datamodule (or anything with ``val_dataloader()``); resolved at run time.
        datamodule_kwargs: more factory arguments (e.g. ``{"val_size": 256}``); they override recorded ones.
        split: ``"val"`` or ``"test"``: which loader of the datamodule is the probe set.
        module_class: dotted path of the LightningModule class of ``.ckpt`` files (default: recorded in
            the checkpoint by ``on_save_checkpoint`` as ``checkpoint["capgeo"]["module_class"]``).
        module_kwargs: overrides passed to ``load_from_checkpoint``.
        selector: token rows: ``answer``, ``last``, ``mean``, ``all`` or a callable (default: ``answer``
            when the probe set has ``answer_mask``, else ``last``).
        num_rows: RankMe rows per layer (the first selected rows of the probe set).
        layers: module names or globs to watch (``.ckpt``: over ``named_modules()``, default the live
            RankMeMonitor's patterns recorded in the checkpoint, else ``**.blocks.*``, ``**.norm_f``;
            Hugging Face: globs over the labels ``embed``, ``layers.*``, default all).
        probes: also measure held-out linear probe accuracy per layer (needs the ``answer`` selector).
        batch_size: batch size over a probe file.
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: Hugging Face weights dtype (``float32``, ``bfloat16``, ``float16`` or ``auto``).
        monitor: accuracy key the LightningModule logs (``.ckpt``); Hugging Face models are scored by exact
            match of the answer when the probe set has ``targets`` and ``answer_mask``.
        logprob_monitor: log-prob key the LightningModule logs, for log-prob emergence.
        mask_key: batch key of the answer mask.
        drop_duplicates: leave out revisions whose weights equal an earlier revision's (default: keep them,
            with a warning, reusing the earlier values).
        allow_pickle: unpickle checkpoints fully (``weights_only=False``); only for files you trust.
        detection: `PrecursorTracker` settings (``threshold``, ``patience``, ``window``, ``min_drop``,
            ``recovery_fraction``, ``recovery_evals``, ``smoothing``).

    Returns:
        The summary dict (shape of ``capgeo_summary.json`` plus ``revisions``, ``duplicate_weights``,
        ``warnings``, ``analysis``).

    Raises:
        ValueError: on a bad argument, a revision series that cannot be ordered, or a probe set or class
            that cannot be resolved (the message says what to pass).
        ImportError: for Hugging Face folders without ``transformers`` installed.
    """
    if selector is not None:
        validate_selector(selector)
    if not isinstance(num_rows, int) or num_rows < 2:
        raise ValueError(f"num_rows must be an integer >= 2, got {num_rows!r}")
    if split not in ("val", "test"):
        raise ValueError(f"split must be 'val' or 'test', got {split!r}")
    unknown = sorted(set(detection or {}) - set(_DETECTION_KEYS))
    if unknown:
        raise ValueError(f"unknown detection settings {unknown}; valid: {', '.join(_DETECTION_KEYS)}")
    tracker = PrecursorTracker(**dict(detection or {}))
    warn = _Warnings()
    revisions = find_revisions(paths, allow_pickle=allow_pickle)
    kind = revisions[0].kind
    log.info("analysing %d %s revision(s): %s", len(revisions), kind, ", ".join(r.name for r in revisions))

    first_checkpoint = _load_checkpoint(revisions[0].path, allow_pickle) if kind == "lightning" else {}
    probe = _build_probe_set(kind, first_checkpoint, revisions[0].path, probe_file=probe_file, task=task,
                             difficulty=difficulty, seed=seed, factory=datamodule_factory,
                             factory_kwargs=datamodule_kwargs, split=split, batch_size=batch_size, warn=warn)
    chosen_selector: Selector = selector if selector is not None else ("answer" if mask_key in probe.keys else "last")
    cls: type[pl.LightningModule] | None = None
    watch: list[str] | None = list(layers) if layers else None
    if kind == "lightning":
        cls = _module_class(module_class, first_checkpoint, revisions[0].path)
        watch = watch or _recorded_layers(first_checkpoint) or list(DEFAULT_LAYERS)
    del first_checkpoint

    results: list[dict[str, Any]] = []
    by_hash: dict[str, dict[str, Any]] = {}
    skipped: list[dict[str, Any]] = []
    labels: list[str] = []
    parameters = 0
    hparams: dict[str, Any] = {}
    for index, revision in enumerate(revisions, 1):
        log.info("revision %s (step %d, %d/%d)", revision.name, revision.step, index, len(revisions))
        model: Any = None
        if kind == "lightning":
            checkpoint = _load_checkpoint(revision.path, allow_pickle)
            digest = weights_sha256(checkpoint["state_dict"])
            hparams = dict(checkpoint.get("hyper_parameters") or hparams)
            del checkpoint
        else:
            model = _load_hf(revision.path, device, dtype)
            digest = weights_sha256(model.state_dict())
        entry: dict[str, Any] = {"name": revision.name, "path": str(revision.path), "step": revision.step,
                                 "weights_sha256": digest, "duplicate_of": None}
        earlier = by_hash.get(digest)
        if results and results[-1]["step"] == revision.step:
            # the same step twice: a Lightning `last.ckpt` beside its numbered copy is harmless
            if digest == results[-1]["weights_sha256"]:
                skipped.append({"name": revision.name, "step": revision.step,
                                "reason": f"same step and weights as {results[-1]['name']}"})
                continue
            raise ValueError(f"{results[-1]['name']} and {revision.name} are both at step {revision.step} but hold "
                             "different weights (two runs in one folder?); pass the files of one run")
        if earlier is not None:
            entry["duplicate_of"] = earlier["name"]
            if drop_duplicates:
                skipped.append({"name": revision.name, "step": revision.step,
                                "reason": f"identical weights to {earlier['name']} (dropped)"})
                continue
            measured = earlier["_measured"]
        elif kind == "lightning":
            assert cls is not None and watch is not None
            load_kwargs = dict(module_kwargs or {})
            if "weights_only" in inspect.signature(cls.load_from_checkpoint).parameters:  # Lightning >= 2.5
                load_kwargs["weights_only"] = not allow_pickle
            module = cls.load_from_checkpoint(revision.path, map_location="cpu", **load_kwargs)
            measured, labels = _measure_lightning(module, probe, layers=watch, selector=chosen_selector,
                                                  num_rows=num_rows, probes=probes, device=device, monitor=monitor,
                                                  logprob_monitor=logprob_monitor, warn=warn)
            del module
        else:
            measured, labels = _measure_hf(model, probe, layers=watch, selector=chosen_selector, num_rows=num_rows,
                                           probes=probes, device=device, mask_key=mask_key, warn=warn)
        del model
        parameters = measured.parameters or parameters
        entry.update({"_measured": measured, "acc": measured.acc, "logprob": measured.logprob,
                      "rankme": dict(measured.rankme), "probe_acc": dict(measured.probe_acc)})
        by_hash.setdefault(digest, entry)
        results.append(entry)
        for alert in tracker.update(revision.step, measured.acc, measured.rankme):
            where = "the run" if alert.kind == "run" else f"layer {alert.layer}"
            warn(f"alert:{alert.kind}:{alert.layer}",
                 f"precursor alert at step {alert.step}: RankMe of {where} collapsed at step {alert.collapse_step} "
                 f"(floor {alert.floor:.2f}) and recovered by step {alert.recovery_step}, before acquisition")

    duplicates = _duplicate_groups(results, warn)
    labels = labels or (list(results[0]["rankme"]) if results else [])
    summary = _summary(tracker, results, labels, kind=kind, probe=probe, selector=chosen_selector, num_rows=num_rows,
                       watch=watch, monitor=monitor if kind == "lightning" else "probe_set/acc",
                       logprob_key=(logprob_monitor or "logprob") if kind == "lightning" else "probe_set/logprob",
                       hparams=hparams, parameters=parameters)
    summary.update({"revisions": [{k: v for k, v in r.items() if not k.startswith("_")} for r in results],
                    "skipped_revisions": skipped, "duplicate_weights": duplicates, "warnings": warn.messages})
    return _json_safe(summary)


def _build_probe_set(
    kind: str, checkpoint: Mapping[str, Any], path: Path, *, probe_file: str | Path | None, task: str | None,
    difficulty: str | None, seed: int | None, factory: str, factory_kwargs: Mapping[str, Any] | None, split: str,
    batch_size: int, warn: _Warnings,
) -> _ProbeSet:
    if probe_file is not None:
        return _probe_file(probe_file, batch_size)
    recorded, sources = _recorded_datamodule(checkpoint, path) if kind == "lightning" else ({}, [])
    kwargs = dict(recorded)
    for key, value in (("task", task), ("difficulty", difficulty), ("seed", seed)):
        if value is not None:
            kwargs[key] = value
    kwargs.update(dict(factory_kwargs or {}))
    if "task" not in kwargs or "difficulty" not in kwargs:
        raise ValueError("no probe set: pass --probe-file rows.pt, or --task T --difficulty D (built by "
                         f"--datamodule-factory {factory}); " + (
                             "the checkpoint and its run folder record no task" if kind == "lightning" else
                             "Hugging Face folders record no task"))
    notes = [f"datamodule arguments from {source}" for source in sources]
    if sources and "val_size" not in kwargs and not any("hyper_parameters" in s for s in sources):
        warn("val_size", f"the run records task {kwargs['task']!r}/{kwargs['difficulty']!r} but not the "
             "datamodule's val_size: the factory default is used, so the probe rows may differ from the live "
             "run's (pass --datamodule-kwargs '{\"val_size\": N}' to match it)")
    return _probe_datamodule(factory, kwargs, split, notes)


def _module_class(name: str | None, checkpoint: Mapping[str, Any], path: Path) -> type[pl.LightningModule]:
    name = name or _recorded_module_class(checkpoint)
    if not name:
        raise ValueError(f"{path} does not record its LightningModule class; pass --module-class "
                         "package.module.ClassName (e.g. models.CapabilityModule)")
    cls = resolve_dotted(name)
    if not (isinstance(cls, type) and issubclass(cls, pl.LightningModule)):
        raise ValueError(f"--module-class {name!r} is {cls!r}, not a lightning.pytorch.LightningModule subclass")
    return cls


def _duplicate_groups(results: Sequence[Mapping[str, Any]], warn: _Warnings) -> list[dict[str, Any]]:
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for entry in results:
        groups.setdefault(entry["weights_sha256"], []).append(entry)
    duplicates = []
    for digest, members in groups.items():
        if len(members) < 2:
            continue
        names = [m["name"] for m in members]
        duplicates.append({"weights_sha256": digest, "revisions": names, "steps": [m["step"] for m in members]})
        warn(f"dup:{digest}", f"revisions {', '.join(names)} hold identical weights (sha256 {digest[:12]}...): their "
             "RankMe is the same by construction, so a flat stretch there is not geometry")
    return duplicates


def _summary(
    tracker: PrecursorTracker, results: Sequence[Mapping[str, Any]], labels: Sequence[str], *, kind: str,
    probe: _ProbeSet, selector: Selector, num_rows: int, watch: Sequence[str] | None, monitor: str,
    logprob_key: str, hparams: Mapping[str, Any], parameters: int,
) -> dict[str, Any]:
    """The capgeo_summary.json fields that apply offline, built by the same detection code as live."""
    depths = {label: depth for depth, label in enumerate(labels)}
    tracked = tracker.summary(depths=depths)
    steps = tracker.steps
    series: dict[str, list[list[float]]] = dict(tracked.get("series", {}))
    logprob = [[r["step"], r["logprob"]] for r in results if math.isfinite(r["logprob"])]
    emergence = None
    if logprob:
        acc_at = dict(zip(steps, tracker.acc, strict=True))
        emergence = detect_logprob_emergence([p[0] for p in logprob], [p[1] for p in logprob],
                                             [acc_at.get(p[0], math.nan) for p in logprob],
                                             threshold=math.log(0.5))
        series[logprob_key] = logprob
    for label in labels:
        points = [[r["step"], r["probe_acc"][label]] for r in results
                  if label in r["probe_acc"] and math.isfinite(r["probe_acc"][label])]
        if points:
            series[f"probe_acc/{label}"] = points
    rows: dict[str, int] = {}
    for entry in results:
        rows.update(entry["_measured"].rows)
    settings = tracked.get("settings", {})
    collapse_kwargs = {k: settings[k] for k in ("min_drop", "recovery_fraction", "recovery_evals", "smoothing")}
    measures: dict[str, dict[str, Any]] = {}
    for tag, points in series.items():
        transition = transition_kind(tag, MEASURE_TRANSITIONS)
        if transition is None or len(points) < 2:
            continue
        found = measure_transition([int(p[0]) for p in points], [p[1] for p in points], tracked["acquisition_step"],
                                   transition, threshold=settings.get("threshold", 0.5),
                                   window=int(settings.get("window", 3)), reference_steps=steps,
                                   **(collapse_kwargs if transition == "collapse" else {}))
        measures[tag] = {"kind": found.kind, "transition_step": found.step,
                         "precedes_acquisition": found.precedes_acquisition}
    described = probe.description
    run_info = {key: described.get("kwargs", {}).get(key) for key in ("task", "difficulty", "seed")
                if described.get("kwargs", {}).get(key) is not None}
    if "params" in described.get("kwargs", {}):
        run_info["task_params"] = described["kwargs"]["params"]
    if "size" in hparams:
        run_info["size"] = hparams["size"]
    analysis = {
        "source": "offline", "model_kind": kind, "selector": selector if isinstance(selector, str) else repr(selector),
        "num_rows": num_rows, "probe_set": described, "layers": list(labels),
        "watched": list(watch) if watch else None, "acc": monitor,
    }
    if kind == "hf":
        analysis["layer_note"] = HF_NOTE
    return {
        **run_info,
        "parameters": parameters,
        "steps": steps[-1] if steps else None,
        "monitor": monitor,
        "rankme_rows": rows,
        **tracked,
        "logprob_emergence_step": None if emergence is None else emergence.step,
        "acc_at_logprob_emergence": None if emergence is None else emergence.acc_at_step,
        "measures": measures,
        "series": series,
        "analysis": analysis,
    }


def _json_safe(value: Any) -> Any:
    """NaN/Inf -> None and tuples -> lists, so the summary is valid JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, Tensor) and value.numel() == 1:
        return _json_safe(value.item())
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    return str(value)


# -- the report --------------------------------------------------------------------------------------
def format_report(summary: Mapping[str, Any]) -> str:
    """The per-revision RankMe table, duplicate notes and the detection verdict, as plain text."""
    analysis = summary.get("analysis", {})
    labels: list[str] = list(analysis.get("layers", []))
    probe = analysis.get("probe_set", {})
    where = probe.get("path") or "{}/{} {} set".format(
        probe.get("kwargs", {}).get("task"), probe.get("kwargs", {}).get("difficulty"), probe.get("split"))
    rows = sorted(set(summary.get("rankme_rows", {}).values()))
    lines = [f"offline analysis of {len(summary.get('revisions', []))} {analysis.get('model_kind')} revision(s); "
             f"probe set: {where}; selector {analysis.get('selector')}; rows per layer: "
             f"{', '.join(map(str, rows)) or 'none'} (num_rows {analysis.get('num_rows')})"]
    if analysis.get("layer_note"):
        lines.append(f"note: {analysis['layer_note']}")
    widths = [max(9, len(label) + 2) for label in labels]
    header = f"{'step':>8}  {'revision':<18}{'acc':>8}" + "".join(
        f"{label:>{w}}" for label, w in zip(labels, widths, strict=True)) + "  weights"
    lines += ["", "RankMe per layer", header, "-" * len(header)]
    for entry in summary.get("revisions", []):
        values = entry.get("rankme", {})
        cells = "".join(f"{_cell(values.get(label)):>{w}}" for label, w in zip(labels, widths, strict=True))
        duplicate = entry.get("duplicate_of")
        note = f"= {duplicate} (identical weights)" if duplicate else entry["weights_sha256"][:12]
        lines.append(f"{entry['step']:>8}  {entry['name'][:17]:<18}{_cell(entry.get('acc')):>8}{cells}  {note}")
    for skip in summary.get("skipped_revisions", []):
        lines.append(f"skipped {skip['name']} (step {skip['step']}): {skip['reason']}")
    for group in summary.get("duplicate_weights", []):
        lines.append(f"WARNING identical weights: {', '.join(group['revisions'])} (steps "
                     f"{', '.join(map(str, group['steps']))}); a flat stretch there is not geometry")
    lines += ["", f"acquisition step: {summary.get('acquisition_step')} ({summary.get('monitor')})   "
                  f"log-prob emergence step: {summary.get('logprob_emergence_step')}",
              f"verdict: {summary.get('verdict')}   gap: {summary.get('gap')} steps   "
              f"layer-order rho: {_cell(summary.get('layer_order_rho'), 2)}"]
    width = max([16, *(len(label) + 2 for label in labels)])
    table = f"{'layer':<{width}}{'collapse':>10}{'floor':>9}{'recovery':>10}  verdict"
    lines += [table, "-" * len(table)]
    for name, info in summary.get("layers", {}).items():
        lines.append(f"{name:<{width}}{str(info.get('collapse_step')):>10}{_cell(info.get('floor')):>9}"
                     f"{str(info.get('recovery_step')):>10}  {info.get('verdict')}")
    return "\n".join(lines)


def _cell(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


# -- command line ------------------------------------------------------------------------------------
def _json_arg(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not JSON ({err}): {text!r}; e.g. '{{\"val_size\": 256}}'") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m capgeo_callbacks.analyze`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m capgeo_callbacks.analyze",
        description="Per-layer RankMe and precursor detection over saved revisions: Lightning .ckpt files "
                    "or Hugging Face save_pretrained folders (step1000/, step2000/, ...).",
        epilog=HF_NOTE + ".",
    )
    add = parser.add_argument
    add("paths", nargs="+", help=".ckpt files, run or checkpoint folders, HF model folders, or a folder of HF "
        "revision subfolders")
    add("--output", help=f"summary JSON path (default: {SUMMARY_FILENAME} in the first path's folder)")
    add("--quiet", action="store_true", help="no table, only warnings")

    probe = parser.add_argument_group("probe set").add_argument
    probe("--probe-file", help="torch.save'd dict with input_ids (N x T) and optionally answer_mask, targets, "
          "attention_mask")
    probe("--task", help="task for the datamodule factory (default: recorded by the run)")
    probe("--difficulty", help="difficulty for the datamodule factory (default: recorded by the run)")
    probe("--seed", type=int, help="datamodule seed (default: recorded by the run)")
    probe("--datamodule-factory", default=DEFAULT_DATAMODULE_FACTORY,
          help="dotted path of a callable (task=, difficulty=, **kwargs) -> datamodule (default: %(default)s)")
    probe("--datamodule-kwargs", type=_json_arg, help="more factory arguments as JSON, e.g. '{\"val_size\": 256}'")
    probe("--split", default="val", choices=("val", "test"), help="datamodule loader to use (default: %(default)s)")
    probe("--batch-size", type=int, default=256, help="batch size over a probe file (default: %(default)s)")

    measure = parser.add_argument_group("measures").add_argument
    measure("--selector", choices=SELECTORS, help="token rows (default: answer if the probe set has answer_mask, "
            "else last)")
    measure("--num-rows", type=int, default=2048, help="RankMe rows per layer (default: %(default)s)")
    measure("--layers", help="comma-separated module names or globs (.ckpt: default the live monitor's; HF: globs "
            "over embed, layers.*, default all)")
    measure("--probes", action="store_true", help="also held-out linear probe accuracy per layer")
    measure("--monitor", default="val/acc", help="accuracy key the LightningModule logs (default: %(default)s)")

    model = parser.add_argument_group("models").add_argument
    model("--module-class", help="dotted path of the LightningModule class of .ckpt files, e.g. "
          "models.CapabilityModule (default: recorded in the checkpoint)")
    model("--module-kwargs", type=_json_arg, help="JSON overrides for load_from_checkpoint")
    model("--device", default="cpu", help="cpu, cuda or cuda:N (default: %(default)s)")
    model("--dtype", default="float32", choices=("float32", "bfloat16", "float16", "auto"),
          help="HF weights dtype (default: %(default)s)")
    model("--allow-pickle", action="store_true", help="unpickle checkpoints fully (weights_only=False); only for "
          "files you trust")

    detect = parser.add_argument_group("detection (spec §7)").add_argument
    detect("--threshold", type=float, default=0.5, help="acquisition accuracy threshold (default: %(default)s)")
    detect("--patience", type=int, default=3, help="evaluations at or above it (default: %(default)s)")
    detect("--min-drop", type=float, default=0.25,
           help="least peak-to-trough drop of a collapse, as a fraction of the peak (default: %(default)s)")
    detect("--drop-duplicates", action="store_true", help="leave out revisions whose weights equal an earlier one's")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the analysis from the command line; prints the table and writes the summary JSON."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.num_rows < 2:
        parser.error(f"--num-rows must be at least 2, got {args.num_rows}")
    if args.batch_size < 1:
        parser.error(f"--batch-size must be at least 1, got {args.batch_size}")
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                            format="%(levelname)s %(name)s: %(message)s")
    layers = [p.strip() for p in args.layers.split(",") if p.strip()] if args.layers else None
    try:
        summary = analyze(
            args.paths, probe_file=args.probe_file, task=args.task, difficulty=args.difficulty, seed=args.seed,
            datamodule_factory=args.datamodule_factory, datamodule_kwargs=args.datamodule_kwargs, split=args.split,
            module_class=args.module_class, module_kwargs=args.module_kwargs, selector=args.selector,
            num_rows=args.num_rows, layers=layers, probes=args.probes, batch_size=args.batch_size,
            device=args.device, dtype=args.dtype, monitor=args.monitor, drop_duplicates=args.drop_duplicates,
            allow_pickle=args.allow_pickle,
            detection={"threshold": args.threshold, "patience": args.patience, "min_drop": args.min_drop},
        )
    except (ValueError, FileNotFoundError, ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    first = Path(args.paths[0])
    output = Path(args.output) if args.output else (first if first.is_dir() else first.parent) / SUMMARY_FILENAME
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(summary, indent=1))
    if not args.quiet:
        print(format_report(summary))
        print(f"\nsummary: {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
