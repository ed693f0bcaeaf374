"""Alerts: what a rule raises at an evaluation (:class:`Alert`), and the geometry rules' own
(:class:`CollapseAlert`: a layer's collapse and recovery first confirmed while the run has not acquired,
found by :func:`scan_alerts` on the series so far)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from capgeo_callbacks.detection.events import detect_acquisition, detect_collapse
from capgeo_callbacks.detection.settings import DEFAULT_SETTINGS, DetectionSettings


@dataclass(frozen=True, kw_only=True)
class Alert:
    """An alert raised by a rule at an evaluation.

    Attributes:
        kind: ``"run"`` (the rule's warning for the run) or ``"layer"`` (a rule that warns per layer too).
        layer: the layer it concerns (empty when the rule reads no layer).
        step: the step of the evaluation at which it was raised.
        rule: the name of the rule that raised it.
        evidence: what the rule saw, in words.
    """

    kind: Literal["layer", "run"] = "run"
    layer: str = ""
    step: int
    rule: str
    evidence: str = ""

    def message(self, monitor: str = "val/acc") -> str:
        """The alert in one line (the logging warning, every logger's text, the summary's ``message``)."""
        return f"capgeo {self.rule} alert at step {self.step}: {self.evidence}"


# said with the run's precursor alert: a RankMe dip and recovery comes early in nearly every run, shuffled-answer
# controls included (docs/evidence.md), so it is no forecast
WHAT_IT_SAYS = ("Such a dip comes early in most runs, also in runs that never learn: it says training has started, "
                "not that the task is coming")


@dataclass(frozen=True, kw_only=True)
class CollapseAlert(Alert):
    """An alert of the geometry rules: a layer's RankMe collapsed and recovered while the run had not acquired.

    Attributes:
        collapse_step: the layer's collapse (trough) step.
        floor: the layer's collapse floor so far.
        recovery_step: the step at which recovery was confirmed.
        peak: the smoothed RankMe the drop started from.
        trough: the smoothed RankMe at the trough.
        drop_noise_units: (peak - trough) in units of the layer's own evaluation-to-evaluation noise (None if
            the noise could not be estimated): how far the collapse stands out.
        layers: for the run alert, every layer that had alerted when it was raised.
    """

    rule: str = "study"
    collapse_step: int
    floor: float
    recovery_step: int
    peak: float | None = None
    trough: float | None = None
    drop_noise_units: float | None = None
    layers: tuple[str, ...] = ()

    def message(self, monitor: str = "val/acc") -> str:
        where = f"the run (first layer: {self.layer})" if self.kind == "run" else f"layer {self.layer}"
        evidence = ""
        if self.drop_noise_units is not None and self.peak is not None and math.isfinite(self.peak):
            evidence = (f"; drop {self.peak:.2f} -> {self.trough:.2f}, {self.drop_noise_units:.1f} noise units, "
                        f"{self.step - self.collapse_step} steps since the trough")
        if self.kind == "run" and len(self.layers) > 1:
            evidence += f"; layers {', '.join(self.layers)}"
        if self.kind == "run":
            evidence += f". {WHAT_IT_SAYS}"
        return (f"capgeo precursor alert at step {self.step}: RankMe of {where} collapsed at step "
                f"{self.collapse_step} (floor {self.floor:.2f}) and recovered by step {self.recovery_step}, "
                f"while {monitor} is still below the acquisition threshold{evidence}")


def alert_from_record(record: Mapping[str, Any]) -> Alert:
    """The alert a record (``dataclasses.asdict`` of one, as a checkpoint or a summary holds it) describes: a
    :class:`CollapseAlert` where it has the collapse fields, else an :class:`Alert`."""
    geometry = record.get("collapse_step") is not None
    cls = CollapseAlert if geometry else Alert
    known = {item.name for item in fields(cls)}
    values = {key: tuple(value) if key == "layers" else value for key, value in record.items() if key in known}
    return cls(**{"rule": "study", **values} if geometry else values)


def scan_alerts(
    steps: Sequence[int],
    acc: Sequence[float],
    rankme: Mapping[str, Sequence[float]],
    settings: DetectionSettings = DEFAULT_SETTINGS,
    raised: Sequence[CollapseAlert] = (),
    rule: str = "study",
) -> list[CollapseAlert]:
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
        rule: the name the alerts carry.
    """
    if not steps or detect_acquisition(steps, acc, settings.threshold, settings.patience) is not None:
        return []
    layer_alerts = [alert for alert in raised if alert.kind == "layer"]
    done = {alert.layer for alert in layer_alerts}
    names = list(rankme)
    eligible = names[-1:] if settings.alert_layers == "deepest" else names
    new: list[CollapseAlert] = []
    for name in eligible:
        if name in done:
            continue
        collapse = detect_collapse(steps, rankme[name], settings)
        if collapse is not None and collapse.recovery_step is not None:
            new.append(CollapseAlert(kind="layer", layer=name, step=int(steps[-1]), rule=rule,
                                     collapse_step=collapse.step, floor=collapse.floor,
                                     recovery_step=collapse.recovery_step, peak=collapse.peak, trough=collapse.trough,
                                     drop_noise_units=collapse.drop_in_noise_units))
    alerted = layer_alerts + new
    needed = min(settings.layers_required, len(eligible))
    if new and len(alerted) >= needed and not any(alert.kind == "run" for alert in raised):
        first = alerted[0]
        new.append(replace(first, kind="run", step=int(steps[-1]), layers=tuple(a.layer for a in alerted)))
    return new
