"""A batch as the measures take it: a tensor, a mapping or a tuple/list (nested or not) whose tensor leaves all have
the batch as their leading dimension. How a model is called on a batch and what its loss is are the caller's
(``forward`` and ``loss_fn``); capgeo's own conventions for its tasks are in :mod:`capgeo_callbacks.capture.batches`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["batch_size_of", "call_model", "split_batch", "to_device"]


def call_model(model: nn.Module, batch: Any) -> Any:
    """The measures' default ``forward``: ``model(batch)`` for a tensor, ``model(batch[0])`` for a tuple or list
    such as ``(x, y)``.

    Raises:
        ValueError: a mapping (which key is the input is the caller's to say) or an empty tuple/list.
        TypeError: any other batch type.
    """
    if isinstance(batch, Tensor):
        return model(batch)
    if isinstance(batch, (tuple, list)):
        if not batch:
            raise ValueError("got an empty tuple/list batch; expected (x, y, ...)")
        return model(batch[0])
    if isinstance(batch, Mapping):
        raise ValueError(f"a dict batch (keys {sorted(batch)}) needs forward=lambda model, batch: ... to say how to "
                         "call the model")
    raise TypeError(f"a batch is a tensor, a tuple/list or a mapping, got {type(batch).__name__}; pass "
                    "forward=lambda model, batch: ... to say how to call the model")


def split_batch(batch: Any) -> tuple[list[Tensor], Callable[[list[Tensor]], Any]]:
    """Tensor leaves of a (nested) tensor/mapping/tuple/list batch and a function that rebuilds it.

    0-d tensors and non-tensors are kept as constants (not mapped over).
    """
    leaves: list[Tensor] = []

    def build(obj: Any) -> Callable[[list[Tensor]], Any]:
        if isinstance(obj, Tensor) and obj.dim() > 0:
            index = len(leaves)
            leaves.append(obj)
            return lambda values: values[index]
        if isinstance(obj, Mapping):
            builders = {key: build(value) for key, value in obj.items()}
            return lambda values: {key: b(values) for key, b in builders.items()}
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
            builders_nt = [build(value) for value in obj]
            return lambda values: type(obj)(*(b(values) for b in builders_nt))
        if isinstance(obj, (tuple, list)):
            builders_seq = [build(value) for value in obj]
            return lambda values: type(obj)(b(values) for b in builders_seq)
        return lambda values: obj

    rebuild = build(batch)
    return leaves, rebuild


def batch_size_of(batch: Any) -> int:
    """The common leading dimension of a batch's tensor leaves.

    Raises:
        ValueError: no tensor leaf, or leaves with different leading sizes.
    """
    leaves, _ = split_batch(batch)
    if not leaves:
        raise ValueError(f"batch of type {type(batch).__name__} has no tensor with a leading batch dimension")
    sizes = {leaf.shape[0] for leaf in leaves}
    if len(sizes) != 1:
        raise ValueError(
            "batch tensors disagree on the leading (batch) dimension: shapes "
            f"{[tuple(x.shape) for x in leaves]}"
        )
    return sizes.pop()


def to_device(batch: Any, device: torch.device | str) -> Any:
    """``batch`` with every tensor moved to ``device`` (same structure)."""
    if isinstance(batch, Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {key: to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(to_device(value, device) for value in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(value, device) for value in batch)
    return batch
