"""A live precursor tracker for plain Python loops (no Lightning): feed it each evaluation."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from capgeo_callbacks.detection.alerts import Alert, scan_alerts
from capgeo_callbacks.detection.events import detect_acquisition
from capgeo_callbacks.detection.run import detect_run
from capgeo_callbacks.detection.series import as_float, as_step
from capgeo_callbacks.detection.settings import DEFAULT_SETTINGS, DetectionSettings


class PrecursorTracker:
    """Owns one run's accuracy and per-layer RankMe series and raises alerts as they arrive.

    For training loops outside Lightning; :class:`~capgeo_callbacks.PrecursorDetector` does the same from
    the measure callbacks' own series. A step at or before the last one (a repeated evaluation) replaces
    the evaluations from that step on; alerts already raised stay raised.

    Example::

        tracker = PrecursorTracker(DetectionSettings())
        for step, acc, ranks in evaluations:
            for alert in tracker.update(step, acc, ranks):
                print(alert)
        results = tracker.results()
    """

    def __init__(self, settings: DetectionSettings = DEFAULT_SETTINGS) -> None:
        if not isinstance(settings, DetectionSettings):
            raise ValueError(f"settings must be a DetectionSettings, got {type(settings).__name__}")
        self.settings = settings
        self.steps: list[int] = []
        self.acc: list[float] = []
        self.rankme: dict[str, list[float]] = {}
        self.alerts: list[Alert] = []

    @property
    def acquired_step(self) -> int | None:
        """The acquisition step, once confirmed; None before."""
        return detect_acquisition(self.steps, self.acc, self.settings.threshold, self.settings.patience)

    def update(self, step: int, acc: float, rankme_by_layer: Mapping[str, float]) -> list[Alert]:
        """Record one evaluation and return the alerts it raises (usually none).

        A layer left out of ``rankme_by_layer``, or NaN, is a skipped measurement.
        """
        step, acc_value = as_step(step), as_float("acc", acc)
        measured: dict[str, float] = {}
        for name, value in rankme_by_layer.items():  # every value checked before anything changes
            if not isinstance(name, str):
                raise ValueError(f"layer names must be strings, got {name!r}")
            measured[name] = as_float(f"rankme[{name!r}]", value)
        if self.steps and step <= self.steps[-1]:
            keep = sum(1 for s in self.steps if s < step)
            del self.steps[keep:], self.acc[keep:]
            for values in self.rankme.values():
                del values[keep:]
        self.steps.append(step)
        self.acc.append(acc_value)
        for name in measured:
            self.rankme.setdefault(name, [math.nan] * (len(self.steps) - 1))
        for name, series in self.rankme.items():
            value = measured.get(name, math.nan)
            series.append(value if math.isfinite(value) else math.nan)
        new = scan_alerts(self.steps, self.acc, self.rankme, self.settings, self.alerts)
        self.alerts += new
        return new

    def results(self) -> dict[str, Any]:
        """:func:`~capgeo_callbacks.detection.detect_run` on the series so far."""
        acc = [[s, a] for s, a in zip(self.steps, self.acc, strict=True)]  # NaN: below the threshold
        rankme = {name: [[s, v] for s, v in zip(self.steps, values, strict=True) if math.isfinite(v)]
                  for name, values in self.rankme.items()}
        return detect_run(acc, rankme, self.settings)
