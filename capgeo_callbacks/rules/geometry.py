"""Geometry rules: a layer's RankMe collapses and recovers while the run has not acquired.

``study`` is the rule of the study this project started from (arXiv 2602.15997): any watched layer, a 25% drop
from its peak, a 10% recovery, no warm-up guard. ``geometry-guarded`` is the same with every RankMe point inside
the learning-rate warm-up's window ignored (the study's collapse sits at the end of the warm-up on every run,
controls included: docs/study.md) and a drop that must stand three noise units above the layer's own
evaluation-to-evaluation noise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from capgeo_callbacks.detection.alerts import Alert, CollapseAlert, scan_alerts
from capgeo_callbacks.detection.settings import DetectionSettings
from capgeo_callbacks.keys import ACC, RANKME, by_layer
from capgeo_callbacks.rules.base import Needs, Rule, RuleOutput, RunView

__all__ = ["GeometryRule", "StudyRule"]


class StudyRule(Rule):
    """The study's precursor rule (or any :class:`DetectionSettings` of it): alerts per layer, then for the run.

    Args:
        settings: the detection settings (acquisition threshold, collapse and recovery).
        rankme_prefix: tag prefix of the RankMe series.
    """

    name = "study"

    def __init__(self, settings: DetectionSettings | None = None, rankme_prefix: str = RANKME) -> None:
        self.detection = settings if settings is not None else DetectionSettings()
        self.rankme_prefix = rankme_prefix

    @property
    def needs(self) -> Needs:  # type: ignore[override]
        return Needs(series=(ACC, f"{self.rankme_prefix}*"))

    def settings_for(self, run: RunView) -> DetectionSettings:
        return self.detection

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        rankme = by_layer({tag: list(run.values(tag)) for tag in run.tags(self.rankme_prefix)}, self.rankme_prefix)
        earlier = [alert for alert in raised if isinstance(alert, CollapseAlert)]
        return RuleOutput(alerts=scan_alerts(list(run.steps), list(run.values(ACC)), rankme, self.settings_for(run),
                                             earlier, rule=self.name))

    def settings(self) -> dict[str, Any]:
        return {"detection": self.detection.to_dict(), "rankme_prefix": self.rankme_prefix}

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> StudyRule:
        values = dict(settings)
        values["settings"] = DetectionSettings.from_dict(values.pop("detection", {}))
        return cls(**values)


class GeometryRule(StudyRule):
    """The study's rule with RankMe before ``guard_warmups`` warm-ups ignored and a noise scale on the drop.

    Args:
        settings: the detection settings (``guard_steps`` is raised to ``guard_warmups`` x the run's warm-up).
        guard_warmups: how many warm-up lengths to ignore (the run's ``warmup_steps``; a run that records none
            is guarded by ``settings.guard_steps`` alone).
        rankme_prefix: tag prefix of the RankMe series.
    """

    name = "geometry-guarded"

    def __init__(self, settings: DetectionSettings | None = None, guard_warmups: float = 2.0,
                 rankme_prefix: str = RANKME) -> None:
        super().__init__(settings if settings is not None else DetectionSettings(noise_units=3.0), rankme_prefix)
        if guard_warmups < 0:
            raise ValueError(f"guard_warmups must be >= 0, got {guard_warmups}")
        self.guard_warmups = float(guard_warmups)

    def settings_for(self, run: RunView) -> DetectionSettings:
        warmup = run.warmup_steps or 0
        guard = max(self.detection.guard_steps, round(self.guard_warmups * warmup))
        return self.detection.replace(guard_steps=guard)

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "guard_warmups": self.guard_warmups}
