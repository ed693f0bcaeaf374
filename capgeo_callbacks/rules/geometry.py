"""Geometry rules: a layer's RankMe collapses and recovers while the run has not acquired, or its classes separate.

``rankme-recovery`` (:class:`RankMeRecoveryRule`; formerly ``study``, the rule of the study this project started
from, arXiv 2602.15997): any watched layer, a 25% drop from its peak, a 10% recovery, no warm-up guard.
``geometry-guarded`` is the same with every RankMe point inside the learning-rate warm-up's window ignored (the
collapse sits at the end of the warm-up on every run, controls included: docs/evidence.md) and a drop that must stand
three noise units above the layer's own evaluation-to-evaluation noise. ``ildr-rise``: a layer's ILDR reaches a
multiple of its early baseline (arXiv 2604.20923). ``commutator-rise``: the commutator defect of the loss reaches a
multiple of its early baseline (arXiv 2602.16967).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from capgeo_callbacks.detection.alerts import Alert, CollapseAlert, scan_alerts
from capgeo_callbacks.detection.settings import ALERT_LAYERS, DetectionSettings
from capgeo_callbacks.keys import ACC, COMMUTATOR_DEFECT, ILDR, RANKME, RANKME_RECOVERY, by_layer
from capgeo_callbacks.rules.base import Needs, Rule, RuleOutput, RunView, renamed_class

__all__ = ["CommutatorRiseRule", "GeometryRule", "ILDRRiseRule", "RankMeRecoveryRule"]


def check_rise(multiple: float, baseline_evals: int, source: str) -> None:
    """The arguments of a rise-over-baseline rule, checked (``source``: where the default multiple comes from)."""
    if isinstance(multiple, bool) or not isinstance(multiple, (int, float)) or not 1 < multiple < math.inf:
        raise ValueError(f"multiple must be a finite number above 1 ({source}), got {multiple!r}")
    if isinstance(baseline_evals, bool) or not isinstance(baseline_evals, int) or baseline_evals < 1:
        raise ValueError(f"baseline_evals must be an integer >= 1, got {baseline_evals!r}")


def risen(run: RunView, tag: str, multiple: float, baseline_evals: int) -> str | None:
    """The evidence, in words, when the series ``tag`` at this evaluation is at least ``multiple`` times its baseline
    (the median of its first ``baseline_evals`` finite values, > 0), never at one of those; else None."""
    measured = [value for value in run.values(tag) if math.isfinite(value)]
    last = run.last(tag)
    if len(measured) <= baseline_evals or not math.isfinite(last):
        return None  # the baseline still forming, or no value at this evaluation
    baseline = statistics.median(measured[:baseline_evals])
    if baseline > 0 and last >= multiple * baseline:
        return f"{tag} reached {last:.3g}, {last / baseline:.2f} x its baseline {baseline:.3g}"
    return None


class RankMeRecoveryRule(Rule):
    """A layer's RankMe collapsed and recovered while the run has not acquired (docs/design.md, "Alert"): an alert per
    layer, then for the run once ``settings.layers_required`` layers have alerted. Its alert is the ``precursor
    alert``; such a dip comes early in nearly every run, runs that never learn included. Formerly ``StudyRule``,
    named ``"study"``: the former names still work, with a ``DeprecationWarning``.

    Args:
        settings: the detection settings (acquisition threshold, collapse and recovery).
        rankme_prefix: tag prefix of the RankMe series.
    """

    name = RANKME_RECOVERY

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
    def from_settings(cls, settings: Mapping[str, Any]) -> RankMeRecoveryRule:
        values = dict(settings)
        values["settings"] = DetectionSettings.from_dict(values.pop("detection", {}))
        return cls(**values)


class GeometryRule(RankMeRecoveryRule):
    """``rankme-recovery`` with RankMe before ``guard_warmups`` warm-ups ignored and a noise scale on the drop.

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


class ILDRRiseRule(Rule):
    """Warns once, when a layer's ILDR (docs/design.md, "ILDR") reaches ``multiple`` times its early baseline, the
    median of its first ``baseline_evals`` measured values; a later evaluation's value, never one of those.

    Args:
        multiple: the multiple of the baseline that alerts, > 1. Default 2.5: the threshold of its source (arXiv
            2604.20923, on modular arithmetic and S5 composition), not yet chosen on capgeo's calibration runs.
        baseline_evals: how many of the layer's first measured values make its baseline, >= 1.
        layer: ``"deepest"``, the deepest layer the run records ILDR of (the representation the readout reads: the
            source's second-to-last layer); ``"any"``, the first watched layer to cross; or a layer's name.
        ildr_prefix: tag prefix of the ILDR series.

    Raises:
        ValueError: on a bad argument.
    """

    name = "ildr-rise"

    def __init__(self, multiple: float = 2.5, baseline_evals: int = 3, layer: str = "deepest",
                 ildr_prefix: str = ILDR) -> None:
        check_rise(multiple, baseline_evals, "the source's is 2.5")
        if not isinstance(layer, str) or not layer:
            raise ValueError(f"layer must be one of {', '.join(ALERT_LAYERS)} or a layer's name, got {layer!r}")
        if not isinstance(ildr_prefix, str) or not ildr_prefix.endswith("/") or len(ildr_prefix) < 2:
            raise ValueError(f"ildr_prefix must be a tag prefix ending in '/', got {ildr_prefix!r}")
        self.multiple, self.baseline_evals, self.layer = float(multiple), baseline_evals, layer
        self.ildr_prefix = ildr_prefix

    @property
    def needs(self) -> Needs:  # type: ignore[override]
        key = f"{self.ildr_prefix}*" if self.layer in ALERT_LAYERS else f"{self.ildr_prefix}{self.layer}"
        return Needs(series=(ACC, key))

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        if raised:
            return RuleOutput()
        tags = run.tags(self.ildr_prefix)
        tags = tags[-1:] if self.layer == "deepest" else tags if self.layer == "any" else \
            [tag for tag in tags if tag == f"{self.ildr_prefix}{self.layer}"]
        for tag in tags:
            evidence = risen(run, tag, self.multiple, self.baseline_evals)
            if evidence:
                return RuleOutput(alerts=[self.alert(run, evidence, layer=tag[len(self.ildr_prefix):])])
        return RuleOutput()

    def settings(self) -> dict[str, Any]:
        return {"multiple": self.multiple, "baseline_evals": self.baseline_evals, "layer": self.layer,
                "ildr_prefix": self.ildr_prefix}


class CommutatorRiseRule(Rule):
    """Warns once, when the commutator defect (docs/design.md, "Commutator defect") reaches ``multiple`` times its
    early baseline, the median of its first ``baseline_evals`` measured values; a later value, never one of those.

    Args:
        multiple: the multiple of the baseline that alerts, > 1. Default 2, chosen by no data: its source (arXiv
            2602.16967) reports the defect rising well before grokking with no multiple capgeo could take, and on
            the twins' calibration runs no multiple of its grid (1.5 to 5) kept its false alarms within the cap
            (docs/twins.md), so none was chosen and no default rule uses it.
        baseline_evals: how many of its first measured values make its baseline, >= 1.
        key: the series' tag.

    Raises:
        ValueError: on a bad argument.
    """

    name = "commutator-rise"

    def __init__(self, multiple: float = 2.0, baseline_evals: int = 3, key: str = COMMUTATOR_DEFECT) -> None:
        check_rise(multiple, baseline_evals, "2 by default, chosen by no data: docs/twins.md")
        if not isinstance(key, str) or not key:
            raise ValueError(f"key must be a series' tag, got {key!r}")
        self.multiple, self.baseline_evals, self.key = float(multiple), baseline_evals, key

    @property
    def needs(self) -> Needs:  # type: ignore[override]
        return Needs(series=(ACC, self.key))

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        evidence = None if raised else risen(run, self.key, self.multiple, self.baseline_evals)
        return RuleOutput(alerts=[self.alert(run, evidence)]) if evidence else RuleOutput()

    def settings(self) -> dict[str, Any]:
        return {"multiple": self.multiple, "baseline_evals": self.baseline_evals, "key": self.key}


def __getattr__(name: str) -> Any:
    """``StudyRule``, the former name of :class:`RankMeRecoveryRule`, with a ``DeprecationWarning``."""
    return renamed_class(__name__, name, globals())
