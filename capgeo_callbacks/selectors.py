"""Token selectors: which rows of a (B, T, D) hidden-state tensor a measure uses."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor

Selector = str | Callable[[Tensor, Any], Tensor]
SELECTORS = ("answer", "last", "mean", "all")


class SelectorError(ValueError):
    """The batch does not carry what the selector needs (for example no answer mask)."""


def validate_selector(selector: Selector) -> None:
    if not callable(selector) and selector not in SELECTORS:
        raise ValueError(f"unknown token selector {selector!r}; valid: {', '.join(SELECTORS)} or a callable")


def select_rows(hidden: Tensor, batch: Any, selector: Selector, mask_key: str = "answer_mask") -> Tensor:
    """Rows (N, D) of ``hidden`` (B, T, D) chosen by ``selector``.

    ``answer``: positions where ``batch[mask_key]`` is true (for capgeo's tasks, the positions that
    predict answer tokens); ``last``: the last position of each sequence; ``mean``: the mean over
    positions; ``all``: every position; a callable gets ``(hidden, batch)`` and returns (N, D) rows.
    A 2-D ``hidden`` (B, D) is used as it is by the built-in selectors.
    """
    if callable(selector):
        rows = selector(hidden, batch)
        if not isinstance(rows, Tensor) or rows.dim() != 2:
            raise SelectorError("a callable selector must return a 2-D (rows, features) tensor")
        return rows
    if hidden.dim() == 2:
        return hidden
    if hidden.dim() != 3:
        raise SelectorError(f"expected hidden states of shape (batch, seq, features), got {tuple(hidden.shape)}")
    if selector == "answer":
        if not isinstance(batch, Mapping) or mask_key not in batch:
            raise SelectorError(
                f"selector 'answer' needs batch[{mask_key!r}], but the batch has "
                f"{sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__}; "
                "pass selector='last', 'mean', 'all' or a callable"
            )
        mask = batch[mask_key].to(device=hidden.device, dtype=bool)
        if mask.shape != hidden.shape[:2]:
            raise SelectorError(f"{mask_key} has shape {tuple(mask.shape)}, hidden states {tuple(hidden.shape)}")
        return hidden[mask]
    if selector == "last":
        return hidden[:, -1]
    if selector == "mean":
        return hidden.mean(dim=1)
    return hidden.flatten(0, 1)
