"""Constructed series with hand-computed answers, shared by the detection tests."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from capgeo_callbacks.detection import DEFAULT_SETTINGS, Alert, DetectionSettings
from capgeo_callbacks.rules import RankMeRecoveryRule, RunView, replay
from capgeo_callbacks.run.tracker import RunTracker

STEPS = [100 * i for i in range(20)]
# Collapse at index 8 (step 800), recovery confirmed at index 11 (step 1100), acquisition at index 15.
# Smoothed (width 3): 10 10 10 10 9.33 7.67 5.33 3.67 [3] 3.67 5 7 8.67 9.67 10 ...; level 3 + 0.1 * 7.
PRECURSOR_RANKME = [10, 10, 10, 10, 10, 8, 5, 3, 3, 3, 5, 7, 9, 10, 10, 10, 10, 10, 10, 10]
PRECURSOR_ACC = [0.0] * 13 + [0.1, 0.2, 0.6, 0.7, 0.8, 0.9, 1.0]
# RankMe still falling when accuracy crosses 0.5 at index 8 (step 800); trough at index 9.
SIMULTANEOUS_RANKME = [10] * 6 + [8, 6, 4, 3, 3, 4, 6, 8, 10, 10, 10, 10, 10, 10]
SIMULTANEOUS_ACC = [0.0] * 8 + [0.6] * 12
# A second layer collapsing later: smoothed trough at index 11 (step 1100), recovery confirmed at 1400.
LATE_RANKME = [10] * 9 + [7, 4, 3, 3, 5, 7, 9, 10, 10, 10, 10]


def points(steps: Sequence[int], values: Sequence[float]) -> list[list[float]]:
    """``[[step, value], ...]`` from parallel sequences."""
    return [[step, value] for step, value in zip(steps, values, strict=True)]


def feed(tracker: RunTracker, steps: Sequence[int], acc: Sequence[float],
         layers: Mapping[str, Sequence[float]]) -> list[Alert]:
    """Feed every evaluation to ``tracker``, one at a time, with the RankMe series measured so far (finite
    values only, as a measure callback records them); the alerts it raised, in order."""
    alerts: list[Alert] = []
    measured: dict[str, list[list[float]]] = {f"rankme/{name}": [] for name in layers}
    for i, step in enumerate(steps):
        for name, values in layers.items():
            if math.isfinite(values[i]):
                measured[f"rankme/{name}"].append([step, values[i]])
        alerts += tracker.update(step, acc[i], measured=measured).alerts
    return alerts


def core(alerts: list[Alert]) -> list[tuple]:
    """What an alert says happened (its evidence fields aside): kind, layer, step, collapse, floor, recovery."""
    return [(a.kind, a.layer, a.step, a.collapse_step, a.floor, a.recovery_step) for a in alerts]


def replayed(steps: Sequence[int], acc: Sequence[float], layers: Mapping[str, Sequence[float]],
             settings: DetectionSettings = DEFAULT_SETTINGS) -> list[Alert]:
    """Every alert the study's rule raises on these series, replayed evaluation by evaluation."""
    series = {f"rankme/{name}": points(steps, values) for name, values in layers.items()}
    view = RunView.from_points(points(steps, acc), series)
    return replay(RankMeRecoveryRule(settings), view, settings=settings)[0]
