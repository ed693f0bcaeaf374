"""Warning rules and forecasters on one protocol (:class:`Rule`): live in the run session, offline in the scorer.

``RULES`` maps each name to a factory; :func:`register_rule` adds a user's own, so the scorer's command line
and the callbacks' ``rules=`` argument can name it. Every registered rule passes one conformance test
(tests/rules/test_conformance.py). A former name (``"study"``, ``StudyRule``: now ``"rankme-recovery"``,
:class:`RankMeRecoveryRule`) still works, with a ``DeprecationWarning`` (:mod:`capgeo_callbacks.rules.base`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from capgeo_callbacks.detection.settings import DetectionSettings
from capgeo_callbacks.keys import RANKME, RANKME_RECOVERY, RENAMED_RULES, VAL_LOSS
from capgeo_callbacks.rules.base import (
    Forecast,
    Needs,
    Rule,
    RuleOutput,
    RunView,
    deprecated_name,
    renamed_class,
    replay,
    rule_from_record,
    rule_output,
    rule_record,
)
from capgeo_callbacks.rules.baselines import (
    ClockRule,
    LogprobEmergenceRule,
    LossOnsetRule,
    ProbeCrossingRule,
    WarmupEndRule,
)
from capgeo_callbacks.rules.fall import FallFromPeakRule
from capgeo_callbacks.rules.forecasters import (
    ClockForecaster,
    CurveForecaster,
    ForecastRule,
    RidgeForecaster,
    ThresholdForecaster,
)
from capgeo_callbacks.rules.geometry import CommutatorRiseRule, GeometryRule, ILDRRiseRule, RankMeRecoveryRule
from capgeo_callbacks.rules.registration import rules_from_registration
from capgeo_callbacks.rules.stopping import StoppingPolicy
from capgeo_callbacks.rules.survival import SurvivalForecaster
from capgeo_callbacks.rules.trend import AccuracyOnsetRule, LastValueForecaster, LinearForecaster, TrendForecaster

__all__ = [
    "RULES",
    "AccuracyOnsetRule",
    "ClockForecaster",
    "ClockRule",
    "CommutatorRiseRule",
    "CurveForecaster",
    "FallFromPeakRule",
    "Forecast",
    "ForecastRule",
    "GeometryRule",
    "ILDRRiseRule",
    "LastValueForecaster",
    "LinearForecaster",
    "LogprobEmergenceRule",
    "LossOnsetRule",
    "Needs",
    "ProbeCrossingRule",
    "RankMeRecoveryRule",
    "RidgeForecaster",
    "Rule",
    "RuleOutput",
    "RunView",
    "StoppingPolicy",
    "SurvivalForecaster",
    "ThresholdForecaster",
    "TrendForecaster",
    "WarmupEndRule",
    "default_rules",
    "make_rule",
    "register_rule",
    "replay",
    "rule_from_record",
    "rule_output",
    "rule_record",
    "rules_from_registration",
]

RULES: dict[str, Callable[[], Rule]] = {
    RANKME_RECOVERY: RankMeRecoveryRule,  # a layer's RankMe collapsed 25% and recovered 10% (formerly "study")
    "geometry-guarded": GeometryRule,
    "ildr-rise": ILDRRiseRule,  # ILDR at 2.5 x its early baseline (arXiv 2604.20923); the multiple is an argument
    # the commutator defect at 2 x its early baseline (arXiv 2602.16967); the multiple is an argument
    "commutator-rise": CommutatorRiseRule,
    "loss-onset": LossOnsetRule,
    # a series' fall from its highest value so far: the validation loss 10% below it for 3 evaluations; the deepest
    # layer's RankMe 10% below it, the first 50 steps (a warm-up's dip) ignored
    "val-loss-fall": partial(FallFromPeakRule, key=VAL_LOSS, fall=0.1, held=3, name="val-loss-fall"),
    "rankme-fall": partial(FallFromPeakRule, key=RANKME, fall=0.1, held=1, ignore_steps=50, name="rankme-fall"),
    "logprob-emergence": LogprobEmergenceRule,
    "probe-crossing": ProbeCrossingRule,
    "warmup-end": WarmupEndRule,
    "clock-20": lambda: ClockRule(fraction=0.2, name="clock-20"),
    "token_acc-threshold": lambda: ThresholdForecaster("token_acc"),
    "logprob-threshold": lambda: ThresholdForecaster("logprob"),
    "curve-families": CurveForecaster,
    # from the monitored accuracy (or the loss) alone, no calibration: the default and what a user compares it with
    "acc-trend": TrendForecaster,
    "acc-last": LastValueForecaster,
    "acc-linear": LinearForecaster,
    "acc-onset": AccuracyOnsetRule,
    "loss-threshold": lambda: ThresholdForecaster("loss", window=1.0),
    # fitted on calibration runs (ClockForecaster().fit(runs), as study.registrations.forecast does); unfitted they
    # forecast nothing
    "clock": ClockForecaster,
    "ridge": RidgeForecaster,
    "ridge-geometry": lambda: RidgeForecaster(geometry=True),
    # the probability of acquisition within the budget, from a survival model fitted on calibration runs
    "survival": SurvivalForecaster,
}


def default_rules(settings: DetectionSettings | None = None, rankme_prefix: str = RANKME) -> list[Rule]:
    """The rules capgeo runs when none are given: ``rankme-recovery`` (a layer's RankMe dipped and recovered: its alerts
    and the run's verdict; such a dip comes early in nearly every run, so it says training has started), the warning
    chosen on calibration runs and tested as registered on runs it was not chosen on (``probe-crossing``: a linear
    probe reading the targets halfway from chance; docs/heldout.md), and the forecaster that needs nothing but the
    monitored accuracy (``acc-trend``, chosen on calibration runs: docs/user-forecast.md). A rule joins them only where
    the record shows it warns earlier than these, at no more false alarms, on the held-out runs of both registered
    tests (docs/who-learns.md, docs/grokking.md: "Every rule's lead at a capped false-alarm rate"). They need RankMe,
    probe and accuracy series; a run without one leaves that rule out and says so once. ``rankme_prefix``: the tag
    prefix of the RankMe series ``rankme-recovery`` reads."""
    return [RankMeRecoveryRule(settings, rankme_prefix), ProbeCrossingRule(), TrendForecaster()]


def register_rule(name: str, factory: Callable[[], Rule]) -> None:
    """Make a rule known by ``name`` (to the scorer's ``--rules`` and to the callbacks' ``rules=``)."""
    if not name or not isinstance(name, str):
        raise ValueError(f"a rule name must be a non-empty string, got {name!r}")
    RULES[name] = factory


def make_rule(name: str) -> Rule:
    """A fresh rule by name; a former name (:data:`~capgeo_callbacks.keys.RENAMED_RULES`) gives the rule it became,
    with a ``DeprecationWarning``; an unknown name is an error that lists the known ones."""
    if name in RENAMED_RULES and name not in RULES:
        deprecated_name(name, RENAMED_RULES[name])
        name = RENAMED_RULES[name]
    if name not in RULES:
        raise ValueError(f"unknown rule {name!r}; known rules: {', '.join(RULES)}")
    return RULES[name]()


def __getattr__(name: str) -> Any:
    """``StudyRule``, the former name of :class:`RankMeRecoveryRule`, with a ``DeprecationWarning``."""
    return renamed_class(__name__, name, globals())
