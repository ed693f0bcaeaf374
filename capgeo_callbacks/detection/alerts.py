"""Precursor alerts: raised at the evaluation where a layer's collapse and recovery are first confirmed
while the run has not acquired. The same functions raise them live and replay them offline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from capgeo_callbacks.detection.events import detect_acquisition, detect_collapse
from capgeo_callbacks.detection.settings import DEFAULT_SETTINGS, DetectionSettings


@dataclass(frozen=True)
class Alert:
    """An alert raised by a rule at an evaluation. For the geometry rules (``study``): a layer's RankMe
    collapsed and recovered while the run had not acquired; other rules leave the geometry fields None and
    say why in ``evidence``.

    Attributes:
        kind: "layer" (once per layer) or "run" (once per run, with the first layer that raised).
        layer: the layer whose collapse raised it ("" for rules that read no layer).
        step: the step of the evaluation at which it was raised.
        collapse_step: the layer's collapse (trough) step.
        floor: the layer's collapse floor so far.
        recovery_step: the step at which recovery was confirmed.
        peak: the smoothed RankMe the drop started from.
        trough: the smoothed RankMe at the trough.
        drop_noise_units: (peak - trough) in units of the layer's own evaluation-to-evaluation noise (None if
            the noise could not be estimated): the evidence of how far the collapse stands out.
        layers: for the run alert, every layer that had alerted when it was raised.
        rule: the name of the rule that raised it.
        evidence: what the rule saw, in words (rules other than the geometry ones).
    """

    kind: Literal["layer", "run"]
    layer: str
    step: int
    collapse_step: int | None
    floor: float | None
    recovery_step: int | None
    peak: float | None = None
    trough: float | None = None
    drop_noise_units: float | None = None
    layers: tuple[str, ...] = ()
    rule: str = "study"
    evidence: str = ""


def scan_alerts(
    steps: Sequence[int],
    acc: Sequence[float],
    rankme: Mapping[str, Sequence[float]],
    settings: DetectionSettings = DEFAULT_SETTINGS,
    raised: Sequence[Alert] = (),
) -> list[Alert]:
    """The alerts raised at the last of ``steps``, given the alerts ``raised`` before.

    A layer alert is raised the first time that layer's collapse and recovery are both confirmed on its
    series so far while the run has not acquired (only the deepest layer may alert with
    ``settings.alert_layers == "deepest"``); the run alert once ``settings.layers_required`` layers have
    alerted, with the first of them. Nothing is raised twice, and nothing once acquired.

    Args:
        steps: the evaluation steps so far.
        acc: the accuracy at each step.
        rankme: per layer, RankMe at each step (NaN where not measured), in depth order.
        settings: detection settings.
        raised: alerts raised at earlier evaluations.
    """
    if not steps or detect_acquisition(steps, acc, settings.threshold, settings.patience) is not None:
        return []
    layer_alerts = [alert for alert in raised if alert.kind == "layer"]
    done = {alert.layer for alert in layer_alerts}
    names = list(rankme)
    eligible = names[-1:] if settings.alert_layers == "deepest" else names
    new: list[Alert] = []
    for name in eligible:
        if name in done:
            continue
        collapse = detect_collapse(steps, rankme[name], settings)
        if collapse is not None and collapse.recovery_step is not None:
            new.append(Alert("layer", name, int(steps[-1]), collapse.step, collapse.floor, collapse.recovery_step,
                             collapse.peak, collapse.trough, collapse.drop_in_noise_units))
    alerted = layer_alerts + new
    needed = min(settings.layers_required, len(eligible))
    if new and len(alerted) >= needed and not any(alert.kind == "run" for alert in raised):
        first = alerted[0]
        new.append(replace(first, kind="run", step=int(steps[-1]), layers=tuple(a.layer for a in alerted)))
    return new


def replay_alerts(
    steps: Sequence[int],
    acc: Sequence[float],
    rankme: Mapping[str, Sequence[float]],
    settings: DetectionSettings = DEFAULT_SETTINGS,
) -> list[Alert]:
    """Every alert a live run with these series would have raised, in order (offline analysis, re-scoring)."""
    alerts: list[Alert] = []
    for end in range(1, len(steps) + 1):
        prefix = list(steps[:end])
        if detect_acquisition(prefix, acc[:end], settings.threshold, settings.patience) is not None:
            break  # acquisition, once confirmed on a prefix, stays confirmed
        alerts += scan_alerts(prefix, acc[:end], {name: values[:end] for name, values in rankme.items()},
                              settings, alerts)
    return alerts
