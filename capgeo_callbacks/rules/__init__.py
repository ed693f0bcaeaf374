"""Warning rules and forecasters on one protocol (:class:`Rule`): live in the run session, offline in the scorer.

``RULES`` maps each name to a factory; :func:`register_rule` adds a user's own, so the scorer's command line
and the callbacks' ``rules=`` argument can name it. Every registered rule passes one conformance test
(tests/rules/test_conformance.py).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from capgeo_callbacks.detection.settings import DetectionSettings
from capgeo_callbacks.keys import RANKME, VAL_LOSS
from capgeo_callbacks.rules.base import (
    Forecast,
    Needs,
    Rule,
    RuleOutput,
    RunView,
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
from capgeo_callbacks.rules.geometry import CommutatorRiseRule, GeometryRule, ILDRRiseRule, StudyRule
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
    "RidgeForecaster",
    "Rule",
    "RuleOutput",
    "RunView",
    "StoppingPolicy",
    "StudyRule",
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
    "study": StudyRule,
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
    """The rules capgeo recommends on any run: the study's rule (for its alerts and verdict), the warning the project
    chose on its calibration seeds and froze before testing it on held-out seeds (``study/registration.json``;
    docs/heldout.md: a linear probe reading its labels halfway from chance), and the forecaster that needs nothing but
    the monitored accuracy (``acc-trend``, chosen on capgeo's calibration runs and the examples' runs:
    docs/user-forecast.md). They need RankMe, probe and accuracy series; a run without one leaves that rule out and
    says so once. capgeo's own runs, which record their chance level, run the registered forecaster too
    (``train.py``). ``rankme_prefix``: the tag prefix of the RankMe series the study's rule reads."""
    return [StudyRule(settings, rankme_prefix), ProbeCrossingRule(), TrendForecaster()]


def register_rule(name: str, factory: Callable[[], Rule]) -> None:
    """Make a rule known by ``name`` (to the scorer's ``--rules`` and to the callbacks' ``rules=``)."""
    if not name or not isinstance(name, str):
        raise ValueError(f"a rule name must be a non-empty string, got {name!r}")
    RULES[name] = factory


def make_rule(name: str) -> Rule:
    """A fresh rule by name; an unknown name is an error that lists the known ones."""
    if name not in RULES:
        raise ValueError(f"unknown rule {name!r}; known rules: {', '.join(RULES)}")
    return RULES[name]()
