"""Batches as capgeo's callbacks read them: how a model is called on one, where its targets are, and the
answer-mask conventions of capgeo's tasks.

A batch is a tensor, a mapping (capgeo's ``{"input_ids", "targets", "answer_mask"}``, Hugging Face's
``{"input_ids", "labels"}``) or a tuple/list (``(x, y)``) whose tensor leaves all have the batch as their leading
dimension (the structure the measures take, :mod:`capgeo_callbacks.measures.batch`). The answer-mask convention:
``targets`` (B, T) are the next tokens and ``answer_mask`` (B, T) marks the positions whose target is an answer
token; loss and accuracy count only those.

Targets (:func:`find_targets`, docs/design.md, "Probe labels"): the labels a probe reads, found in the shapes users'
batches have, each aligned with the position whose hidden state should predict it, -100 (``F.cross_entropy``'s
ignore index) where a position has none.

A public module of the library (its names are in ``__all__``): the answer loss and scores here are the ones
capgeo's own ``models`` train and validate with, and the ones offline analysis scores revisions with, so
``val/acc`` and ``val/logprob`` mean the same live and offline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from capgeo_callbacks.measures.batch import batch_size_of, call_model, split_batch, to_device

__all__ = [
    "ANSWER_KEYS",
    "IGNORE_INDEX",
    "TargetsNotFound",
    "Targets",
    "find_targets",
    "target_labels",
    "answer_cross_entropy",
    "answer_labels",
    "answer_scores",
    "batch_size_of",
    "concat_batches",
    "default_forward",
    "describe_batch",
    "is_answer_batch",
    "slice_batch",
    "split_batch",
    "to_device",
]

ANSWER_KEYS = ("input_ids", "targets", "answer_mask")
IGNORE_INDEX = -100  # F.cross_entropy's ignore_index: no target at this position
TARGETS_LOOKED_FOR = ("a tuple (inputs, targets); a dict's 'labels' (Hugging Face: unshifted, the model shifts them), "
                      "'targets' (+ 'answer_mask') or 'label'; integer targets of the inputs' shape (B x T, one per "
                      "position, -100 where none) or of shape (B,) (one per example)")


class TargetsNotFound(ValueError):
    """The batch holds no targets capgeo can read (:func:`find_targets`)."""


@dataclass(frozen=True)
class Targets:
    """The targets of a batch, aligned with the model's positions.

    Attributes:
        values: (B, T) the target of the hidden state at each position (``IGNORE_INDEX`` where none), or (B,) one
            label per example.
        source: where they came from, in words (``batch[1]``, ``batch['labels'] shifted by one``...).
        dense: the batch gave every position a target (plain language modelling): the rows are then the last
            position that has one, one per sequence.
    """

    values: Tensor
    source: str
    dense: bool = False

    @property
    def per_position(self) -> bool:
        return self.values.dim() == 2

    def positions(self, attention_mask: Tensor | None = None) -> Tensor:
        """(B, T) booleans: the positions that have a target (real ones, by ``attention_mask`` when given), or, where
        the batch gave every position one (``dense``), the last of them in each sequence."""
        has = self.values != IGNORE_INDEX
        if attention_mask is not None and attention_mask.shape == has.shape:
            has = has & attention_mask.to(device=has.device, dtype=torch.bool)
        if not self.dense:
            return has
        index = torch.arange(has.shape[1], device=has.device)
        last = torch.where(has, index, -1).amax(dim=1)
        return (index[None, :] == last[:, None]) & (last[:, None] >= 0)

    def labels(self, attention_mask: Tensor | None = None) -> Tensor:
        """One label per selected row, in the order the ``target`` selector takes rows."""
        if not self.per_position:
            return self.values
        return self.values[self.positions(attention_mask)]


def _integer(value: Any) -> bool:
    return isinstance(value, Tensor) and not value.dtype.is_floating_point and not value.dtype.is_complex \
        and value.dtype != torch.bool and value.dim() in (1, 2)


def _dense(values: Tensor) -> bool:
    return values.dim() == 2 and not bool((values == IGNORE_INDEX).any())


def find_targets(batch: Any, mask_key: str = "answer_mask") -> Targets:
    """The targets of a batch, aligned with the positions whose hidden states should predict them.

    Read, in this order: capgeo's ``targets`` with ``batch[mask_key]`` (the answer positions); a dict's
    ``labels`` (Hugging Face's convention: unshifted, so the hidden state at position t predicts ``labels[t + 1]``:
    a probe is never handed the token already at its own position), ``targets`` (already the next token at each
    position) or ``label``; the second item of a tuple or list (``(inputs, targets)``, already aligned). Integer
    targets of shape (B, T) give one label per position (-100: none), of shape (B,) one label per example.

    Raises:
        TargetsNotFound: naming what was looked for, when the batch holds none of these.
    """
    if isinstance(batch, Mapping):
        targets, mask = batch.get("targets"), batch.get(mask_key)
        if _integer(targets) and isinstance(mask, Tensor) and mask.shape == targets.shape:
            return Targets(torch.where(mask.to(torch.bool), targets, IGNORE_INDEX),
                           f"batch['targets'][batch[{mask_key!r}]]")
        labels = batch.get("labels")
        if _integer(labels):
            if labels.dim() == 1:
                return Targets(labels, "batch['labels'] (one per example)")
            shifted = torch.full_like(labels, IGNORE_INDEX)
            shifted[:, :-1] = labels[:, 1:]
            attention = batch.get("attention_mask")
            if isinstance(attention, Tensor) and attention.shape == labels.shape:  # no target from a padding token
                shifted[:, :-1] = torch.where(attention[:, 1:].to(torch.bool), shifted[:, :-1], IGNORE_INDEX)
            return Targets(shifted, "batch['labels'], shifted: position t predicts labels[t + 1]",
                           dense=_dense(labels))
        for key in ("targets", "label"):
            if _integer(batch.get(key)):
                return Targets(batch[key], f"batch[{key!r}]", dense=_dense(batch[key]))
    elif isinstance(batch, (tuple, list)) and len(batch) >= 2 and _integer(batch[1]):
        return Targets(batch[1], "batch[1]", dense=_dense(batch[1]))
    raise TargetsNotFound(f"no targets found in the batch ({describe_batch(batch)}); looked for {TARGETS_LOOKED_FOR}")


def target_labels(batch: Any, mask_key: str = "answer_mask") -> Tensor:
    """The labels of the ``target`` selector's rows (:func:`find_targets`): the target at each position that has
    one (or at the last position where all have one), or one label per example.

    Raises:
        TargetsNotFound: when the batch holds no targets.
    """
    attention = batch.get("attention_mask") if isinstance(batch, Mapping) else None
    return find_targets(batch, mask_key).labels(attention if isinstance(attention, Tensor) else None)



def answer_cross_entropy(logits: Tensor, batch: Mapping[str, Tensor]) -> Tensor:
    """Mean cross-entropy over answer tokens: ``sum(CE * mask) / sum(mask)``.

    ``logits`` (B, T, V) are the model's output on ``batch["input_ids"]``; the targets are
    ``batch["targets"]`` (B, T) where ``batch["answer_mask"]`` is true. The default ``loss_fn`` of the
    gradient-based monitors and the training loss of capgeo's models.
    """
    per_token = F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), reduction="none")
    mask = batch["answer_mask"].flatten().to(per_token.dtype)
    return (per_token * mask).sum() / mask.sum().clamp_min(1.0)


def answer_scores(logits: Tensor, targets: Tensor, answer_mask: Tensor) -> dict[str, Tensor]:
    """Per example and per answer token, how right the model is under teacher forcing.

    Args:
        logits: (B, T, V) the model's output.
        targets: (B, T) the next tokens.
        answer_mask: (B, T) true where the target is an answer token.

    Returns:
        ``exact`` (B,): 1.0 where every answer token is the argmax (capgeo's ``val/acc``);
        ``token_right`` (N,): 1.0 per answer token that is the argmax; ``token_logprob`` (N,): the log-probability
        of each correct answer token (its mean is ``val/logprob``); N = answer tokens in the batch, in row-major
        order. The log-softmax is taken on the answer positions only, in float32.
    """
    mask = answer_mask.to(torch.bool)
    right = logits.argmax(dim=-1) == targets  # (B, T)
    log_probs = logits[mask].float().log_softmax(dim=-1)  # (N, V)
    token_logprob = log_probs.gather(-1, targets[mask].unsqueeze(-1)).squeeze(-1)  # (N,)
    return {"exact": (right | ~mask).all(dim=1).float(), "token_right": right[mask].float(),
            "token_logprob": token_logprob}


def answer_labels(batch: Any, target_key: str = "targets", mask_key: str = "answer_mask") -> Tensor:
    """The correct answer token at each answer position, ``batch[target_key][batch[mask_key]]`` (in the
    order the ``answer`` selector takes rows): the labels of the linear probes.

    Raises:
        ValueError: if the batch lacks either key or their shapes differ.
    """
    if not isinstance(batch, Mapping) or target_key not in batch or mask_key not in batch:
        raise ValueError(f"answer labels need batch[{target_key!r}] and batch[{mask_key!r}], but the batch is "
                         f"{describe_batch(batch)}; pass labels_fn=lambda batch: ...")
    targets, mask = batch[target_key], batch[mask_key].to(dtype=torch.bool)
    if targets.shape != mask.shape:
        raise ValueError(f"{target_key} has shape {tuple(targets.shape)}, {mask_key} {tuple(mask.shape)}")
    return targets[mask]


def is_answer_batch(batch: Any) -> bool:
    """Whether ``batch`` follows the answer-mask convention (a mapping with :data:`ANSWER_KEYS`)."""
    return isinstance(batch, Mapping) and all(key in batch for key in ANSWER_KEYS)


def describe_batch(batch: Any) -> str:
    """A short description of a batch's type, for error messages."""
    if isinstance(batch, Mapping):
        return f"a dict with keys {sorted(batch)}"
    if isinstance(batch, (tuple, list)):
        return f"a {type(batch).__name__} of {len(batch)} items"
    return f"a {type(batch).__name__}"


def slice_batch(batch: Any, start: int, stop: int) -> Any:
    """Examples ``start:stop`` of ``batch`` (every tensor leaf sliced), as detached clones."""
    leaves, rebuild = split_batch(batch)
    return rebuild([leaf[start:stop].detach().clone() for leaf in leaves])


def concat_batches(parts: list[Any]) -> Any:
    """One batch from several with the same structure (non-tensor leaves from the first)."""
    if len(parts) == 1:
        return parts[0]
    leaves, rebuild = split_batch(parts[0])
    columns = [split_batch(part)[0] for part in parts]
    return rebuild([torch.cat([column[i] for column in columns]) for i in range(len(leaves))])


def default_forward(model: nn.Module, batch: Any) -> Any:
    """Call ``model`` on a batch: ``model(batch["input_ids"])`` for a mapping (capgeo's tasks), else the measures'
    default (:func:`~capgeo_callbacks.measures.batch.call_model`: ``model(batch)`` for a tensor, ``model(batch[0])``
    for a tuple or list such as ``(x, y)``).

    Raises:
        ValueError: a mapping without ``"input_ids"`` or an empty tuple/list (pass ``forward=``).
        TypeError: any other batch type.
    """
    if isinstance(batch, Mapping):
        if "input_ids" not in batch:
            raise ValueError(
                f"default_forward needs an 'input_ids' key in a dict batch, got keys {sorted(batch)}; "
                "pass forward=lambda model, batch: ... to say how to call the model"
            )
        return model(batch["input_ids"])
    return call_model(model, batch)
