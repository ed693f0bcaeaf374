"""Collectives the measures use. Each runs on every rank, in the same order (a collective on one rank hangs the
job); outside a distributed run they return their input."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def gather_rows(rows: Tensor) -> Tensor:
    """Concatenate the (N_r, D) row blocks of every rank, in rank order.

    N_r may differ between ranks, and a rank with nothing to contribute may pass an empty (0, 0) block.
    """
    if not is_distributed():
        return rows
    shape = torch.tensor(rows.shape, dtype=torch.long, device=rows.device)
    shapes = [torch.zeros_like(shape) for _ in range(dist.get_world_size())]
    dist.all_gather(shapes, shape)
    sizes = [int(s[0]) for s in shapes]
    width = max(int(s[1]) for s in shapes)
    padded = torch.zeros((max(sizes), width), dtype=rows.dtype, device=rows.device)
    padded[: rows.shape[0], : rows.shape[1]] = rows
    blocks = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(blocks, padded)
    kept = [block[:size] for block, size in zip(blocks, sizes, strict=True) if size]
    return torch.cat(kept) if kept else padded[:0]


def broadcast_object(obj: object) -> object:
    """Rank zero's ``obj`` on every rank."""
    if not is_distributed():
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]
