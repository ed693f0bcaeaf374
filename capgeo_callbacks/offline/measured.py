"""What measuring one revision gives, and the warnings an analysis collects on the way."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

__all__ = ["Measured", "WarningLog", "log"]

log = logging.getLogger("capgeo.analyze")


@dataclass
class Measured:
    """One revision's measurements.

    Attributes:
        rankme: RankMe per layer label (NaN where it could not be measured).
        probe_acc: held-out linear probe accuracy per layer label (only layers that were probed).
        acc: accuracy on the probe set (NaN if not measured).
        logprob: mean log-prob of the answer tokens (NaN if not measured).
        rows: rows each tag was measured on (``rankme/<label>``, ``probe_acc/<label>``).
        parameters: the model's parameter count.
    """

    rankme: dict[str, float]
    probe_acc: dict[str, float] = field(default_factory=dict)
    acc: float = math.nan
    logprob: float = math.nan
    rows: dict[str, int] = field(default_factory=dict)
    parameters: int = 0


class WarningLog:
    """Warnings logged once each (on the ``capgeo.analyze`` logger) and kept for the summary.

    Called as ``warn(key, message)``, the signature :class:`~capgeo_callbacks.capture.hooks.HiddenStateCapture`
    reports through.
    """

    def __init__(self) -> None:
        self.messages: list[str] = []
        self._keys: set[str] = set()

    def __call__(self, key: str, message: str) -> None:
        if key in self._keys:
            return
        self._keys.add(key)
        self.messages.append(message)
        log.warning(message)
