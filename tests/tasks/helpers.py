"""Helpers shared by the task tests."""

from __future__ import annotations

import torch
from torch import Tensor

from tasks import DIFFICULTIES, TASKS, TaskDataModule, make_datamodule

LEVELS: list[tuple[str, str]] = [(t, d) for t in TASKS for d in DIFFICULTIES]

_CACHE: dict[tuple[str, str], TaskDataModule] = {}


def datamodule(task: str, difficulty: str) -> TaskDataModule:
    """A seed-0 datamodule per level, cached across tests (its eval sets are built once)."""
    key = (task, difficulty)
    if key not in _CACHE:
        _CACHE[key] = make_datamodule(task, difficulty, seed=0)
    return _CACHE[key]


def full_sequences(batch: dict[str, Tensor]) -> Tensor:
    """Rebuild the full sequences [B, T+1] from a batch dict."""
    return torch.cat([batch["input_ids"][:, :1], batch["targets"]], dim=1)
