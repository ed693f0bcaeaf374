"""Token selectors: which rows of a layer's hidden states a measure uses.

Definitions and the measured choice of default: docs/design.md, "RankMe rows".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from capgeo_callbacks.capture.batches import IGNORE_INDEX, TargetsNotFound, find_targets

# the callable first: a YAML config (LightningCLI) gives a dotted path, which must resolve to the function
Selector = Callable[[Tensor, Any], Tensor] | str
SELECTORS = ("target", "answer", "first_answer", "question_mean", "last", "mean", "all")
# selectors that read the answer mask of capgeo's tasks (batch[mask_key], True at answer positions)
ANSWER_SELECTORS = ("answer", "first_answer", "question_mean")


class SelectorError(ValueError):
    """The batch or the hidden states do not carry what the selector needs (for example no answer mask)."""


def validate_selector(selector: Any) -> None:
    """Raise a ValueError naming the valid selectors unless ``selector`` is one of them or a callable."""
    if not callable(selector) and selector not in SELECTORS:
        raise ValueError(f"unknown token selector {selector!r}; valid: {', '.join(SELECTORS)} or a callable "
                         "(hidden, batch) -> rows")


def default_selector(batch: Any, mask_key: str = "answer_mask") -> str:
    """The rows a batch supports, for a monitor given no selector: ``first_answer`` where the batch holds capgeo's
    answer mask ``batch[mask_key]`` (the measured choice on capgeo's tasks, docs/design.md, "RankMe rows"),
    ``target`` where it holds targets (:func:`~capgeo_callbacks.capture.batches.find_targets`: the positions that
    predict one, or one pooled row per example), else ``mean`` (every hidden-state shape has one)."""
    if isinstance(batch, Mapping) and isinstance(batch.get(mask_key), Tensor):
        return "first_answer"
    try:
        find_targets(batch, mask_key)
    except TargetsNotFound:
        return "mean"
    return "target"


def selector_name(selector: Selector) -> str:
    """A selector's name for summaries (a callable's qualified name)."""
    return selector if isinstance(selector, str) else getattr(selector, "__qualname__", type(selector).__name__)


def select_rows(hidden: Tensor, batch: Any, selector: Selector, mask_key: str = "answer_mask") -> Tensor:
    """Rows (N, D) of ``hidden`` chosen by ``selector``.

    For (B, T, D) hidden states: ``answer``, every position where ``batch[mask_key]`` is true (the
    positions that predict answer tokens); ``first_answer``, one row per example, the position that
    predicts the first answer token; ``question_mean``, one row per example, the mean over the positions
    before it and itself (the question); ``last``, the last real token of each sequence (by
    ``batch["attention_mask"]`` when the batch has one, so left and right padding give the same rows,
    else position -1); ``mean``, the mean over real positions; ``all``, every position. (B, D) hidden
    states are used as they are; (B, C, H, W) feature maps are pooled over space by ``mean`` and
    flattened to one row per location by ``all``. ``target`` reads the batch's targets
    (:func:`~capgeo_callbacks.capture.batches.find_targets`): targets per position give the positions that have one
    (the last of them where every position has one), targets per example one pooled row per example (``mean``).
    A callable gets ``(hidden, batch)`` and returns rows.

    Raises:
        SelectorError: when the batch lacks what the selector needs or the shapes disagree.
    """
    if callable(selector):
        rows = selector(hidden, batch)
        if not isinstance(rows, Tensor) or rows.dim() != 2:
            raise SelectorError("a callable selector must return a 2-D (rows, features) tensor")
        return rows
    if selector == "target":
        return _target_rows(hidden, batch, mask_key)
    if hidden.dim() == 2:
        return hidden
    if hidden.dim() == 4:
        if selector == "mean":
            return hidden.mean(dim=(2, 3))
        if selector == "all":
            return hidden.flatten(2).transpose(1, 2).flatten(0, 1)
        raise SelectorError(f"selector {selector!r} needs (batch, seq, features) hidden states; feature maps of "
                            f"shape {tuple(hidden.shape)} take 'mean' (pooled over space) or 'all'")
    if hidden.dim() != 3:
        raise SelectorError(f"expected hidden states of shape (batch, seq, features), (batch, features) or "
                            f"(batch, channels, height, width), got {tuple(hidden.shape)}")
    found = row_positions(hidden, batch, selector, mask_key)
    if found is not None:
        return rows_at(hidden, found)
    if selector == "question_mean":
        mask = _mask(batch, mask_key, hidden, selector)
        has_answer = mask.any(dim=1)
        first = mask.to(torch.int8).argmax(dim=1)  # first answer position of each example
        positions = torch.arange(hidden.shape[1], device=hidden.device)
        question = (positions[None, :] <= first[:, None])[has_answer]
        summed = torch.where(question[..., None], hidden[has_answer], 0.0).sum(dim=1)
        return summed / question.sum(dim=1, keepdim=True).to(hidden.dtype)
    attention = _attention_mask(batch, hidden)
    if selector == "last":
        return hidden[:, -1]  # no attention mask (with one, its rows are found above)
    if selector == "mean":
        if attention is None:
            return hidden.mean(dim=1)
        weights = attention.to(hidden.dtype)
        real = weights.sum(dim=1) > 0
        summed = torch.where(attention[..., None], hidden, 0.0).sum(dim=1)  # a NaN at a pad position stays out
        return summed[real] / weights.sum(dim=1, keepdim=True)[real]
    return hidden.flatten(0, 1)  # "all" without an attention mask (with one, its rows are found above)


def row_targets(batch: Any, selector: Selector, mask_key: str = "answer_mask") -> Tensor:
    """The target of each row ``selector`` takes from ``batch``, in its order (ILDR's classes, docs/design.md,
    "ILDR"): targets per position (:func:`~capgeo_callbacks.capture.batches.find_targets`) read as hidden states of
    one feature, so that a selector that takes whole positions takes their targets; targets per example as they are
    (one row per example).

    Raises:
        TargetsNotFound: when the batch holds no targets, or the selector's rows have none of their own (a callable,
            rows pooled over positions, several rows per example of one target, a position without a target).
    """
    if callable(selector):
        raise TargetsNotFound(f"the rows of a callable selector ({selector_name(selector)}) have no known targets")
    targets = find_targets(batch, mask_key)
    pooled = ("mean", "question_mean") if targets.per_position else ("answer", "all")
    if selector in pooled:
        raise TargetsNotFound(f"the rows selector {selector!r} takes have no target of their own in {targets.source}")
    if not targets.per_position:
        return targets.values
    try:
        labels = select_rows(targets.values[..., None], batch, selector, mask_key)[:, 0]
    except SelectorError as err:
        raise TargetsNotFound(str(err)) from None
    if bool((labels == IGNORE_INDEX).any()):
        raise TargetsNotFound(f"some rows selector {selector!r} takes have no target in {targets.source}")
    return labels


def row_positions(hidden: Tensor, batch: Any, selector: Selector, mask_key: str = "answer_mask"
                  ) -> tuple[Tensor, Tensor] | None:
    """The ``(examples, positions)`` of the rows a selector that picks whole rows takes from (B, T, D) hidden states:
    ``answer``, ``first_answer``, and ``last`` and ``all`` by an attention mask. They depend on the batch only, so a
    capture finds them once per batch for every layer. None for the others (they pool, or read other shapes).

    Raises:
        SelectorError: when the batch lacks what the selector needs or the shapes disagree.
    """
    if callable(selector) or hidden.dim() != 3:
        return None
    if selector in ("answer", "first_answer"):
        mask = _mask(batch, mask_key, hidden, selector)
        if selector == "answer":
            examples, positions = mask.nonzero(as_tuple=True)
            return examples, positions
        has_answer = mask.any(dim=1)
        first = mask.to(torch.int8).argmax(dim=1)  # first answer position of each example
        return has_answer.nonzero(as_tuple=True)[0], first[has_answer]
    if selector not in ("last", "all"):
        return None
    attention = _attention_mask(batch, hidden)
    if attention is None:
        return None
    if selector == "all":
        examples, positions = attention.nonzero(as_tuple=True)
        return examples, positions
    positions = torch.arange(hidden.shape[1], device=hidden.device)
    last = torch.where(attention, positions, -1).amax(dim=1)
    real = last >= 0
    return real.nonzero(as_tuple=True)[0], last[real]


def rows_at(hidden: Tensor, found: tuple[Tensor, Tensor]) -> Tensor:
    """``hidden[examples, positions]`` of (B, T, D) hidden states (``found``: :func:`row_positions`): one gather of
    whole rows where the rows are laid out contiguously (several times faster than advanced indexing, which copies
    element by element; the same values in the same order)."""
    examples, positions = found
    if not hidden.is_contiguous():
        return hidden[examples, positions]
    return hidden.view(-1, hidden.shape[-1]).index_select(0, examples * hidden.shape[1] + positions)


def _target_rows(hidden: Tensor, batch: Any, mask_key: str) -> Tensor:
    try:
        targets = find_targets(batch, mask_key)
    except TargetsNotFound as err:
        raise SelectorError(str(err)) from None
    if not targets.per_position:
        if hidden.shape[0] != targets.values.shape[0]:
            raise SelectorError(f"{targets.source} has {targets.values.shape[0]} labels for a batch of "
                                f"{hidden.shape[0]} hidden states of shape {tuple(hidden.shape)}")
        return select_rows(hidden, batch, "mean", mask_key)  # one pooled row per example
    if hidden.dim() != 3 or hidden.shape[:2] != targets.values.shape:
        raise SelectorError(f"{targets.source} has shape {tuple(targets.values.shape)} (one target per position), "
                            f"but the hidden states have shape {tuple(hidden.shape)}, not (batch, seq, features) "
                            "with the same positions; pass selector= and labels_fn=")
    return hidden[targets.positions(_attention_mask(batch, hidden)).to(hidden.device)]


def _mask(batch: Any, mask_key: str, hidden: Tensor, selector: str) -> Tensor:
    if not isinstance(batch, Mapping) or mask_key not in batch:
        keys = sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__
        raise SelectorError(f"selector {selector!r} needs batch[{mask_key!r}], but the batch has {keys}; pass "
                            "selector='last', 'mean', 'all' or a callable")
    mask = batch[mask_key].to(device=hidden.device, dtype=torch.bool)
    if mask.shape != hidden.shape[:2]:
        raise SelectorError(f"{mask_key} has shape {tuple(mask.shape)}, hidden states {tuple(hidden.shape)}")
    return mask


def _attention_mask(batch: Any, hidden: Tensor) -> Tensor | None:
    """``batch["attention_mask"]`` as booleans when the batch has one of the hidden states' (B, T) shape."""
    if not isinstance(batch, Mapping) or "attention_mask" not in batch:
        return None
    mask = batch["attention_mask"]
    if not isinstance(mask, Tensor) or tuple(mask.shape) != tuple(hidden.shape[:2]):
        return None
    return mask.to(device=hidden.device, dtype=torch.bool)
