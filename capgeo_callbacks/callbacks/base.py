"""Shared plumbing of capgeo's measure callbacks: per-tag series, evaluation counting, resumable state."""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override


def append_point(points: list[list[float]], step: int, value: float) -> None:
    """Append (step, value), first dropping points at or after ``step`` (a resumed run re-validating)."""
    if points and points[-1][0] >= step:
        points[:] = [p for p in points if p[0] < step]
    points.append([step, value])


class MeasureCallback(Callback):
    """Base of the measure callbacks.

    Each keeps ``series[tag] = [[step, value], ...]`` of what it logged, so that
    :class:`~capgeo_callbacks.PrecursorDetector` reads fresh values at a step and a resumed run
    continues the series without gaps or duplicates.

    Args:
        every_n_evals: measure at every n-th validation (1 = every one).
    """

    def __init__(self, every_n_evals: int = 1) -> None:
        if not isinstance(every_n_evals, int) or every_n_evals < 1:
            raise ValueError(f"every_n_evals must be a positive integer, got {every_n_evals!r}")
        self.every_n_evals = every_n_evals
        self.series: dict[str, list[list[float]]] = {}
        self.evaluations = 0
        self._warned: set[str] = set()

    def should_measure(self, trainer: pl.Trainer) -> bool:
        """Whether the validation now starting is one this callback measures at."""
        return not trainer.sanity_checking and self.evaluations % self.every_n_evals == 0

    def record(self, pl_module: pl.LightningModule, step: int, values: dict[str, float]) -> None:
        """Append finite ``values`` at ``step`` to the series and log them through ``pl_module.log``."""
        for tag, value in values.items():
            if not math.isfinite(value):
                self.warn_once(tag, f"{tag}: non-finite value {value} at step {step}; skipped")
                continue
            append_point(self.series.setdefault(tag, []), step, float(value))
            # identical on every rank (rows are gathered first); syncing is exact and keeps Lightning quiet
            pl_module.log(tag, float(value), on_step=False, on_epoch=True, sync_dist=True)

    def values_at(self, step: int) -> dict[str, float]:
        """The values measured at ``step`` (empty if this callback did not measure then)."""
        return {tag: points[-1][1] for tag, points in self.series.items() if points and points[-1][0] == step}

    def warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            rank_zero_warn(message)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"series": {tag: [list(p) for p in pts] for tag, pts in self.series.items()},
                "evaluations": self.evaluations}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.series = {tag: [list(p) for p in pts] for tag, pts in state_dict.get("series", {}).items()}
        self.evaluations = int(state_dict.get("evaluations", 0))
