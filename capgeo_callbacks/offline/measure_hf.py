"""Measuring a Hugging Face causal LM revision (a ``save_pretrained`` folder) on the probe set.

One pass over the probe rows with ``output_hidden_states=True``: ``hidden_states[0]`` is the token
embeddings (labelled ``embed``) and ``hidden_states[i]`` the output of block ``i - 1`` (``layers.{i-1}``),
except the last, which Hugging Face returns *after the final layer norm*: it is labelled
``layers.{L-1}+final_norm`` (hooking the final norm module gives the same tensor). The raw output of the
last block is not in ``hidden_states`` and is not measured. Rows are kept by the
:class:`~capgeo_callbacks.capture.hooks.HiddenStateCapture` the live monitors use (docs/design.md, "RankMe
rows"). transformers is imported only here, and only when a Hugging Face folder is analysed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from capgeo_callbacks.capture.batches import answer_labels, answer_scores, to_device
from capgeo_callbacks.capture.hooks import HiddenStateCapture
from capgeo_callbacks.capture.layers import glob_match
from capgeo_callbacks.capture.selectors import Selector
from capgeo_callbacks.measures.probes import linear_probe_accuracy
from capgeo_callbacks.measures.rankme import rankme
from capgeo_callbacks.offline.measured import Measured, WarningLog
from capgeo_callbacks.offline.probe_sets import ProbeSet

__all__ = ["FINAL_NORM_SUFFIX", "HF_NOTE", "hf_layer_labels", "load_hf", "measure_hf"]

FINAL_NORM_SUFFIX = "+final_norm"
HF_NOTE = ("Hugging Face hidden_states: 'embed' is the token embeddings, 'layers.i' the output of block i; "
           "the last one, 'layers.{L-1}+final_norm', comes after the final layer norm (the raw output of the "
           "last block is not in hidden_states)")
TARGET_KEY = "targets"


def hf_layer_labels(num_hidden_states: int, num_layers: int) -> list[str]:
    """Labels of a Hugging Face model's ``hidden_states``: ``embed``, ``layers.0`` ...,
    ``layers.{L-1}+final_norm`` (the last hidden state comes after the final layer norm).

    With a count other than ``num_layers + 1`` the convention is unknown: ``hidden_states.{i}``.
    """
    if num_hidden_states != num_layers + 1:
        return [f"hidden_states.{i}" for i in range(num_hidden_states)]
    return ["embed", *[f"layers.{i}" for i in range(num_layers - 1)], f"layers.{num_layers - 1}{FINAL_NORM_SUFFIX}"]


def _import_transformers() -> Any:
    try:
        import transformers
    except ImportError as err:
        raise ImportError("analysing Hugging Face models needs transformers: pip install 'capgeo-callbacks[hf]' "
                          "(or pip install 'transformers>=4.40')") from err
    return transformers


def load_hf(path: Path, device: str, dtype: str) -> nn.Module:
    """``AutoModelForCausalLM.from_pretrained(path)`` from local files only, on ``device``, in eval mode.

    Raises:
        ImportError: if transformers is not installed (the message names the extra to install).
    """
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


class _AnswerScore:
    """Exact match of the whole answer and mean log-prob of the answer tokens, as capgeo's ``val/acc`` and
    ``val/logprob``."""

    def __init__(self) -> None:
        self.correct = self.examples = self.tokens = 0
        self.logprob_sum = 0.0

    def add(self, logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> None:
        scores = answer_scores(logits, targets, mask)
        self.correct += int(scores["exact"].sum())
        self.examples += int(mask.shape[0])
        self.logprob_sum += float(scores["token_logprob"].sum())
        self.tokens += int(scores["token_logprob"].numel())


def measure_hf(
    model: nn.Module,
    probe: ProbeSet,
    *,
    layers: Sequence[str] | None,
    selector: Selector,
    num_rows: int,
    probes: bool,
    device: str,
    mask_key: str,
    warn: WarningLog,
) -> tuple[Measured, list[str]]:
    """RankMe (and probe accuracy) of each hidden state, and the answer's exact match and log-prob.

    Args:
        model: a causal LM whose forward takes ``output_hidden_states``.
        probe: the probe set.
        layers: globs over the labels (``embed``, ``layers.*``); None for all.
        selector: token rows.
        num_rows: rows per layer.
        probes: also held-out linear probe accuracy (needs ``selector="answer"`` and ``targets``).
        device: where the model is.
        mask_key: batch key of the answer mask.
        warn: where problems are reported.

    Returns:
        The measurements and the measured labels, in depth order.

    Raises:
        ValueError: if the probe set is empty, does not fit the vocabulary, or ``layers`` matches nothing.
    """
    num_layers = int(getattr(model.config, "num_hidden_layers", 0))
    vocab = int(getattr(model.config, "vocab_size", 0) or 0)
    score = {TARGET_KEY, mask_key} <= probe.keys  # exact match and log-prob of the answer, like val/acc
    want_probes = probes and score and selector == "answer"
    if probes and not want_probes:
        warn("probes-hf", f"probe accuracy needs the 'answer' selector and {TARGET_KEY!r} + {mask_key!r} in the "
             "probe set (labels are the answer tokens); probes are skipped")
    labels_fn = (lambda batch: answer_labels(batch, TARGET_KEY, mask_key)) if want_probes else None
    capture = HiddenStateCapture(selector, num_rows, mask_key, labels_fn=labels_fn, warn=warn)
    labels: list[str] | None = None
    keep: list[int] = []
    answers = _AnswerScore()
    model.eval()
    with torch.inference_mode():
        for batch in probe.loader:
            if capture.full() and not score:
                break  # rows complete and nothing else to score: skip the rest of the probe set
            batch = to_device(batch, device)
            input_ids = batch["input_ids"]
            if vocab and int(input_ids.max()) >= vocab:
                raise ValueError(f"probe token id {int(input_ids.max())} is outside the model's vocabulary "
                                 f"({vocab} tokens): the probe set does not fit this model")
            extra = {"attention_mask": batch["attention_mask"]} if "attention_mask" in batch else {}
            out = model(input_ids=input_ids, output_hidden_states=True, use_cache=False, **extra)
            if labels is None:
                labels = hf_layer_labels(len(out.hidden_states), num_layers)
                if labels[0] != "embed":
                    warn("hf-labels", f"{type(model).__name__} returned {len(out.hidden_states)} hidden states for "
                         f"{num_layers} layers; they are labelled hidden_states.i")
                keep = [i for i, label in enumerate(labels)
                        if layers is None or any(glob_match(pattern, label) for pattern in layers)]
                if not keep:
                    raise ValueError(f"layer patterns {list(layers or [])} match none of {', '.join(labels)}")
                capture.start([labels[i] for i in keep])
            capture.set_batch(batch)
            for i in keep:
                capture.add(labels[i], out.hidden_states[i])
            if score:
                answers.add(out.logits, batch[TARGET_KEY], batch[mask_key].to(torch.bool))
    if labels is None:
        raise ValueError("the probe set is empty")
    result = Measured(rankme={}, parameters=sum(p.numel() for p in model.parameters()))
    if score and answers.examples:
        result.acc = answers.correct / answers.examples
        result.logprob = answers.logprob_sum / max(answers.tokens, 1)
    for label, (z, y) in capture.take().items():
        _measure_layer(result, label, z, y, num_rows, warn)
    return result, [labels[i] for i in keep]


def _measure_layer(result: Measured, label: str, z: torch.Tensor, y: torch.Tensor | None, num_rows: int,
                   warn: WarningLog) -> None:
    """RankMe of one layer's rows, and the probe accuracy when labels came with them (fit on the first
    half, scored on the second, as :class:`~capgeo_callbacks.LinearProbeMonitor`)."""
    result.rankme[label] = math.nan
    count = z.shape[0]
    if count < 2:
        warn(f"empty:{label}", f"no rows captured for {label!r}; skipped")
        return
    if count < num_rows:
        warn(f"few:{label}", f"{label!r} gave {count} rows, fewer than num_rows={num_rows}; RankMe is "
             f"measured on {count} rows")
    try:
        result.rankme[label] = rankme(z)
    except ValueError as err:  # NaN/Inf or all-zero hidden states: skipped, never a wrong number
        warn(f"value:{label}", f"{label!r}: {err}; skipped")
        return
    result.rows[f"rankme/{label}"] = int(count)
    if y is None or y.shape[0] != count or count < 4:
        return
    half = count // 2
    try:
        result.probe_acc[label] = linear_probe_accuracy(z[:half], y[:half], z[half:], y[half:])
    except (ValueError, RuntimeError) as err:
        warn(f"probe:{label}", f"probe on {label!r}: {err}; skipped")
        return
    result.rows[f"probe_acc/{label}"] = int(count)
