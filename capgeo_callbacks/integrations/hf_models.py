"""Hugging Face causal LMs: their hidden states' labels, loading a saved revision, and measuring one on probe rows.

One pass over the probe rows with ``output_hidden_states=True``: ``hidden_states[0]`` is the token embeddings
(labelled ``embed``) and ``hidden_states[i]`` the output of block ``i - 1`` (``layers.{i-1}``), except the last,
which Hugging Face returns *after the final layer norm*: it is labelled ``layers.{L-1}+final_norm`` (hooking the
final norm module gives the same tensor). The raw output of the last block is not in ``hidden_states`` and is not
measured. Each batch and its hidden states go to the measuring units the Lightning monitors drive
(:mod:`capgeo_callbacks.capture.unit`; docs/design.md, "RankMe rows"). Used by the live callback
(:mod:`capgeo_callbacks.integrations.hf`) and by offline analysis of saved revisions; transformers is imported only
where a saved revision is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from capgeo_callbacks.capture.batches import (
    TARGETS_LOOKED_FOR,
    TargetsNotFound,
    answer_scores,
    find_targets,
    to_device,
)
from capgeo_callbacks.capture.layers import glob_match
from capgeo_callbacks.capture.selectors import ANSWER_SELECTORS, Selector, selector_name, validate_selector
from capgeo_callbacks.capture.unit import HiddenStateUnit, ProbeUnit
from capgeo_callbacks.engine.hidden import HiddenStateMeasure
from capgeo_callbacks.engine.measure import Measure
from capgeo_callbacks.keys import LOGPROB, TOKEN_ACC, VAL_ACC, VAL_LOSS
from capgeo_callbacks.registry import build_measure_callbacks, get_measure, resolve_measures
from capgeo_callbacks.run.failures import check_callable, check_positive_int

__all__ = ["FINAL_NORM_SUFFIX", "HF_NOTE", "MASK_KEY", "TARGET_KEY", "ProbeRows", "check_model", "check_probe_rows",
           "has_targets", "hf_forward", "hf_layer_labels", "hf_loss", "hf_measures", "layer_globs", "load_hf",
           "matched_labels", "probe_batches", "probe_pass", "probe_selector", "scores_answers", "selected_rows",
           "training_examples", "watch_labels"]

FINAL_NORM_SUFFIX = "+final_norm"
HF_NOTE = ("Hugging Face hidden_states: 'embed' is the token embeddings, 'layers.i' the output of block i; "
           "the last one, 'layers.{L-1}+final_norm', comes after the final layer norm (the raw output of the "
           "last block is not in hidden_states)")
TARGET_KEY = "targets"
MASK_KEY = "answer_mask"


def hf_layer_labels(num_hidden_states: int, num_layers: int) -> list[str]:
    """Labels of a Hugging Face model's ``hidden_states``: ``embed``, ``layers.0`` ...,
    ``layers.{L-1}+final_norm`` (the last hidden state comes after the final layer norm).

    With a count other than ``num_layers + 1`` the convention is unknown: ``hidden_states.{i}``.
    """
    if num_hidden_states != num_layers + 1:
        return [f"hidden_states.{i}" for i in range(num_hidden_states)]
    return ["embed", *[f"layers.{i}" for i in range(num_layers - 1)], f"layers.{num_layers - 1}{FINAL_NORM_SUFFIX}"]


def load_hf(path: Path, device: str, dtype: str) -> nn.Module:
    """``AutoModelForCausalLM.from_pretrained(path)`` from local files only, on ``device``, in eval mode.

    Raises:
        ImportError: if transformers is not installed (the message names the extra to install).
    """
    try:
        import transformers
    except ImportError as err:
        raise ImportError("analysing Hugging Face models needs transformers: pip install 'capgeo-callbacks[hf]' "
                          "(or pip install 'transformers>=4.40')") from err
    kwargs: dict[str, Any] = {"local_files_only": True}  # never the hub: revisions are local folders
    version = tuple(int(p) for p in re.findall(r"\d+", transformers.__version__)[:2])
    # the keyword is dtype from transformers 4.56, torch_dtype before
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


def check_probe_rows(rows: Any) -> dict[str, Tensor]:
    """A fixed probe set as the live callback takes it: a dict of N-row tensors with ``input_ids`` (N, T), and
    optionally ``attention_mask``, Hugging Face's ``labels`` (unshifted, -100 where none), or capgeo's ``targets``
    and ``answer_mask`` (both or neither), on the CPU.

    Raises:
        ValueError: naming what is wrong and what is expected.
    """
    if not isinstance(rows, Mapping) or "input_ids" not in rows:
        raise ValueError("probe_rows must be a dict with 'input_ids' (N x T integer tensor), optionally "
                         f"'attention_mask', 'labels' or 'targets' + '{MASK_KEY}'; got "
                         f"{sorted(rows) if isinstance(rows, Mapping) else type(rows).__name__}")
    ids = rows["input_ids"]
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.dtype.is_floating_point or ids.shape[0] < 1:
        raise ValueError(f"probe_rows['input_ids'] must be an N x T integer tensor with N >= 1, got "
                         f"{getattr(ids, 'dtype', type(ids).__name__)} of shape {tuple(getattr(ids, 'shape', ()))}")
    bad = [key for key, value in rows.items() if not isinstance(value, Tensor) or value.shape[:2] != ids.shape]
    if bad:
        raise ValueError(f"probe_rows[{', '.join(map(repr, bad))}] must be tensors of input_ids' shape "
                         f"{tuple(ids.shape)}")
    if (TARGET_KEY in rows) != (MASK_KEY in rows):
        raise ValueError(f"probe_rows needs both {TARGET_KEY!r} and {MASK_KEY!r} (the answer's tokens and where they "
                         f"are) or neither; got {sorted(rows)}")
    return {key: value.detach().cpu() for key, value in rows.items()}


def scores_answers(keys: Iterable[str], mask_key: str = MASK_KEY) -> bool:
    """Whether probe rows with ``keys`` hold targets to score: Hugging Face's ``labels``, or ``targets`` with the
    answer mask."""
    keys = set(keys)
    return {TARGET_KEY, mask_key} <= keys or "labels" in keys


def has_targets(rows: Mapping[str, Tensor]) -> bool:
    """Whether the probe rows hold targets (:func:`~capgeo_callbacks.capture.batches.find_targets`)."""
    try:
        find_targets(rows, MASK_KEY)
    except TargetsNotFound:
        return False
    return True


def probe_selector(rows: Mapping[str, Tensor], selector: Selector | None) -> Selector:
    """The token selector for ``rows``: the one given, else ``target`` when the rows hold targets (``labels``, or
    ``targets`` with an answer mask: the positions that predict one), else ``last``.

    Raises:
        ValueError: on an unknown selector, or an answer selector without an answer mask.
    """
    selector = selector if selector is not None else ("target" if has_targets(rows) else "last")
    validate_selector(selector)
    if selector in ANSWER_SELECTORS and MASK_KEY not in rows:
        raise ValueError(f"selector {selector!r} needs probe_rows[{MASK_KEY!r}]; the rows have {sorted(rows)}. "
                         "Pass selector='last', 'mean', 'all' or a callable")
    return selector


def layer_globs(layers: str | Sequence[str] | None) -> list[str] | None:
    """Globs over the hidden-state labels (``embed``, ``layers.*``...), or None for all.

    Raises:
        ValueError: unless ``layers`` is None, a glob or a non-empty sequence of them.
    """
    patterns = None if layers is None else ([layers] if isinstance(layers, str) else list(layers))
    if patterns is not None and (not patterns or not all(isinstance(p, str) and p for p in patterns)):
        raise ValueError(f"layers must be globs over embed, layers.<i>, ... (non-empty strings) or None, "
                         f"got {layers!r}")
    return patterns


def check_model(model: nn.Module | None, layers: Sequence[str] | None, input_ids: Tensor) -> None:
    """That ``model`` is a Hugging Face model whose hidden states ``layers`` match and whose vocabulary holds the
    probe tokens.

    Raises:
        ValueError: naming what does not fit (the hidden-state labels, the vocabulary size).
    """
    config = getattr(model, "config", None)
    num_layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    if model is None or num_layers < 1:
        raise ValueError(f"a Hugging Face model whose config has num_hidden_layers is needed; got "
                         f"{type(model).__name__}")
    labels = hf_layer_labels(num_layers + 1, num_layers)
    for pattern in layers or ():
        if not any(glob_match(pattern, label) for label in labels):
            raise ValueError(f"layer pattern {pattern!r} matches none of {', '.join(labels)}")
    vocab, top = int(getattr(config, "vocab_size", 0) or 0), int(input_ids.max())
    if vocab and top >= vocab:
        raise ValueError(f"probe token id {top} is outside the model's vocabulary ({vocab} tokens)")


def selected_rows(rows: Mapping[str, Tensor], selector: Selector) -> int:
    """How many rows ``selector`` takes from the probe rows (a hidden state's worth; a callable selector counts as
    one row per example)."""
    if callable(selector):
        return int(rows["input_ids"].shape[0])
    from capgeo_callbacks.capture.selectors import select_rows

    ids = rows["input_ids"]
    return int(select_rows(torch.zeros(*ids.shape, 1), rows, selector, MASK_KEY).shape[0])


def probe_batches(rows: Mapping[str, Tensor], batch_size: int) -> list[dict[str, Tensor]]:
    """The probe rows in batches of ``batch_size``, in order."""
    n = rows["input_ids"].shape[0]
    return [{key: value[i:i + batch_size] for key, value in rows.items()} for i in range(0, n, batch_size)]


class _AnswerScore:
    """Exact match of the whole answer, per-token accuracy and mean log-prob of the answer tokens, as capgeo's
    ``val/acc``, ``val/token_acc`` and ``val/logprob``, and their loss (``val/loss``: the mean cross-entropy of the
    target tokens, what the Trainer's evaluation loss is on these rows). The answer tokens are the target positions
    of :func:`~capgeo_callbacks.capture.batches.find_targets` (the last one where every position has a target)."""

    def __init__(self) -> None:
        self.correct = self.examples = self.tokens = 0
        self.right = self.logprob_sum = 0.0

    def add(self, logits: Tensor, targets: Tensor, mask: Tensor) -> None:
        scores = answer_scores(logits, targets, mask)
        answered = mask.any(dim=1)  # a row without a target has no answer to be right about
        self.correct += int(scores["exact"][answered].sum())
        self.examples += int(answered.sum())
        self.right += float(scores["token_right"].sum())
        self.logprob_sum += float(scores["token_logprob"].sum())
        self.tokens += int(scores["token_logprob"].numel())

    def scalars(self) -> dict[str, float]:
        if not self.examples:
            return {}
        tokens = max(self.tokens, 1)
        return {VAL_ACC: self.correct / self.examples, TOKEN_ACC: self.right / tokens,
                LOGPROB: self.logprob_sum / tokens, VAL_LOSS: -self.logprob_sum / tokens}


def probe_pass(
    model: nn.Module,
    batches: Iterable[Mapping[str, Tensor]],
    units: Sequence[HiddenStateUnit],
    *,
    layers: Sequence[str] | None,
    device: str,
    mask_key: str,
    score: bool,
    warn: Any,
) -> tuple[dict[str, float], list[str]]:
    """One forward pass over the probe ``batches`` with ``output_hidden_states``: each batch and its hidden states, by
    label, go to every unit (watching the labels ``layers`` matches), and with ``score`` the answer is scored.

    Args:
        model: a causal LM whose forward takes ``output_hidden_states``.
        batches: the probe rows, in a fixed order.
        units: the measuring units fed (their values: ``unit.compute()`` afterwards).
        layers: globs over the labels (``embed``, ``layers.*``); None for all.
        device: where the model is.
        mask_key: batch key of capgeo's answer mask.
        score: whether the batches hold targets to score (``labels``, or ``targets`` + the answer mask).
        warn: ``warn(key, message)``, where problems are reported once.

    Returns:
        The answer's scores (``val/acc``, ``val/token_acc``, ``val/logprob``, ``val/loss``; empty without ``score``) and
        the watched labels, in depth order.

    Raises:
        ValueError: if the probe set is empty, does not fit the vocabulary, or ``layers`` matches nothing.
    """
    num_layers = int(getattr(model.config, "num_hidden_layers", 0))
    vocab = int(getattr(model.config, "vocab_size", 0) or 0)
    labels: list[str] | None = None
    answers = _AnswerScore()
    model.eval()
    with torch.inference_mode():
        for batch in batches:
            if labels is not None and all(unit.full for unit in units) and not score:
                break  # rows complete and nothing else to score: skip the rest of the probe set
            batch = to_device(batch, device)
            input_ids = batch["input_ids"]
            if vocab and int(input_ids.max()) >= vocab:
                raise ValueError(f"probe token id {int(input_ids.max())} is outside the model's vocabulary "
                                 f"({vocab} tokens): the probe set does not fit this model")
            extra = {"attention_mask": batch["attention_mask"]} if "attention_mask" in batch else {}
            out = model(input_ids=input_ids, output_hidden_states=True, use_cache=False, **extra)
            if labels is None:
                every = hf_layer_labels(len(out.hidden_states), num_layers)
                if every[0] != "embed":
                    warn("hf-labels", f"{type(model).__name__} returned {len(out.hidden_states)} hidden states for "
                         f"{num_layers} layers; they are labelled hidden_states.i")
                labels = [label for label in every
                          if layers is None or any(glob_match(pattern, label) for pattern in layers)]
                if not labels:
                    raise ValueError(f"layer patterns {list(layers or [])} match none of {', '.join(every)}")
                index = {label: every.index(label) for label in labels}
                for unit in units:
                    unit.watch({label: label for label in labels})
                    unit.start()
            for unit in units:
                unit.update(batch, {label: out.hidden_states[i] for label, i in index.items()})
            if score:
                targets = find_targets(batch, mask_key)
                answers.add(out.logits, targets.values.clamp_min(0), targets.positions(batch.get("attention_mask")))
    if labels is None:
        raise ValueError("the probe set is empty")
    return answers.scalars(), labels



def hf_measures(measures: str | Sequence[str], options: Mapping[str, Mapping[str, Any]] | None,
                probe: ProbeRows) -> list[Measure]:
    """The registered ``measures`` (``"default"``, ``"default,commutator"``, names) as the Hugging Face callback drives
    them: the registry's, built as a Lightning Trainer gets them, ``options[name]`` over the defaults of each; the
    hidden-state ones on the probe rows (their selector and rows per layer, the layers the hidden states' labels); the
    probes only where the rows allow them (``probe``'s decision)."""
    names = resolve_measures(measures) if isinstance(measures, str) else list(measures)
    probe.probes_wanted, probe.probes = (probe.probes_wanted and "probes" in names, probe.probes and "probes" in names)
    names = [name for name in names if name != "probes" or probe.probes]
    rows = {"layers": None, "selector": probe.selector, "num_rows": probe.num_rows, "mask_key": MASK_KEY}
    given = dict(options or {})
    built = build_measure_callbacks(names, {name: {**(rows if get_measure(name).needs == "hidden_states" else {}),
                                                   **given.get(name, {})} for name in names})
    return [measure for measure in built if isinstance(measure, Measure)]


def watch_labels(measures: Sequence[Measure], labels: Sequence[str]) -> None:
    """The hidden-state measures watch the hidden states labelled ``labels`` (their tags known before the pass)."""
    for measure in measures:
        if isinstance(measure, HiddenStateMeasure):
            measure.unit.watch({label: label for label in labels})


def matched_labels(model: nn.Module, layers: Sequence[str] | None) -> list[str]:
    """The labels of ``model``'s hidden states that ``layers`` (globs; None: all) match, in depth order."""
    num_layers = int(getattr(model.config, "num_hidden_layers", 0))
    every = hf_layer_labels(num_layers + 1, num_layers)
    return [label for label in every if layers is None or any(glob_match(pattern, label) for pattern in layers)]


def hf_loss(output: Any, batch: Any) -> Tensor:
    """A Hugging Face model's own loss of a batch (``labels`` among its keys): ``output.loss``."""
    return output.loss


def hf_forward(model: nn.Module, batch: Mapping[str, Tensor]) -> Any:
    """A Hugging Face model called as the Trainer calls it: ``model(**batch)``."""
    return model(**batch)


def training_examples(loader: Any, count: int) -> Any:
    """The first ``count`` examples of a training loader's data set, collated as the loader collates them (a fixed
    batch that draws nothing from the loader's sampler; the global RNG forked, for a collator that draws); None where
    the data set cannot be indexed (an iterable stream)."""
    dataset, collate = getattr(loader, "dataset", None), getattr(loader, "collate_fn", None)
    if dataset is None or collate is None or not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        return None
    with torch.random.fork_rng(devices=[]):
        return collate([dataset[i] for i in range(min(count, len(dataset)))])


class ProbeRows:
    """The fixed probe rows a Hugging Face run is measured on, and how: the hidden states' labels watched, the token
    selector, the rows per layer, the batches of the pass, whether the probes can run on them, the accuracy.

    Args:
        rows: the probe rows (:func:`check_probe_rows`).
        layers: globs over the hidden-state labels (None: all).
        selector: token rows (default :func:`probe_selector`'s).
        num_rows: selected rows per layer (default: every row the selector takes).
        batch_size: rows per forward pass.
        probes: whether the linear probes were asked for.
        acc_fn: ``acc_fn(model, rows) -> float``, the accuracy instead of the exact match.

    Raises:
        ValueError: on a bad argument.
    """

    def __init__(self, rows: Mapping[str, Tensor], layers: str | Sequence[str] | None, selector: Selector | None,
                 num_rows: int | None, batch_size: int, probes: bool, acc_fn: Any) -> None:
        self.rows = check_probe_rows(rows)
        self.selector, self.layers = probe_selector(self.rows, selector), layer_globs(layers)
        self.num_rows = max(2, selected_rows(self.rows, self.selector)) if num_rows is None else num_rows
        check_positive_int("num_rows", self.num_rows, 2)
        check_positive_int("batch_size", batch_size)
        check_callable("acc_fn", acc_fn, "(model, rows) -> float")
        self.acc_fn, self.batches, self.probes_wanted = acc_fn, probe_batches(self.rows, batch_size), bool(probes)
        self.probes = self.probes_wanted and has_targets(self.rows) and self.selector in ("target", "answer") \
            and self.num_rows >= ProbeUnit.min_rows

    def why_no_probes(self) -> str:
        """Why probes asked for cannot run on these rows, and what to pass."""
        if not has_targets(self.rows):
            return (f"no probes: the probe rows hold no targets (looked for {TARGETS_LOOKED_FOR}); pass probe_rows "
                    "with 'labels'")
        return (f"no probes: selector {selector_name(self.selector)!r} takes rows without labels; use 'target' or "
                "'answer'")

    def scores(self, model: nn.Module, units: Sequence[HiddenStateUnit], warn: Any) -> dict[str, float]:
        """One pass of ``model`` over the rows feeding ``units`` (:func:`probe_pass`), and the answer's scores."""
        device = str(next(model.parameters()).device)
        scores, _ = probe_pass(model, self.batches, units, layers=self.layers, device=device, mask_key=MASK_KEY,
                               score=scores_answers(self.rows), warn=warn)
        if self.acc_fn is not None:
            scores[VAL_ACC] = float(self.acc_fn(model, to_device(self.rows, device)))
        return scores
