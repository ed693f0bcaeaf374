"""Warning rules and forecasters on one protocol (:class:`Rule`): live in the run session, offline in the scorer.

``RULES`` maps each name to a factory; :func:`register_rule` adds a user's own, so the scorer's command line
and the callbacks' ``rules=`` argument can name it. Every registered rule passes one conformance test
(tests/rules/test_conformance.py).
"""

from __future__ import annotations

from collections.abc import Callable

from capgeo_callbacks.detection.settings import DetectionSettings
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
from capgeo_callbacks.rules.forecasters import (
    ClockForecaster,
    CurveForecaster,
    ForecastRule,
    RidgeForecaster,
    ThresholdForecaster,
)
from capgeo_callbacks.rules.geometry import GeometryRule, StudyRule

__all__ = [
    "RULES",
    "ClockForecaster",
    "ClockRule",
    "CurveForecaster",
    "Forecast",
    "ForecastRule",
    "GeometryRule",
    "LogprobEmergenceRule",
    "LossOnsetRule",
    "Needs",
    "ProbeCrossingRule",
    "RidgeForecaster",
    "Rule",
    "RuleOutput",
    "RunView",
    "StudyRule",
    "ThresholdForecaster",
    "WarmupEndRule",
    "default_rules",
    "make_rule",
    "register_rule",
    "replay",
    "rule_from_record",
    "rule_output",
    "rule_record",
]

RULES: dict[str, Callable[[], Rule]] = {
    "study": StudyRule,
    "geometry-guarded": GeometryRule,
    "loss-onset": LossOnsetRule,
    "logprob-emergence": LogprobEmergenceRule,
    "probe-crossing": ProbeCrossingRule,
    "warmup-end": WarmupEndRule,
    "clock-20": lambda: ClockRule(fraction=0.2, name="clock-20"),
    "token_acc-threshold": lambda: ThresholdForecaster("token_acc"),
    "logprob-threshold": lambda: ThresholdForecaster("logprob"),
    "curve-families": CurveForecaster,
    # fitted on calibration runs (ClockForecaster().fit(runs), as study.forecast does); unfitted they forecast nothing
    "clock": ClockForecaster,
    "ridge": RidgeForecaster,
    "ridge-geometry": lambda: RidgeForecaster(geometry=True),
}


def default_rules(settings: DetectionSettings | None = None) -> list[Rule]:
    """The rules capgeo recommends: the study's rule (for its alerts and verdict), and the warning and forecaster
    the project chose on its calibration seeds and froze before testing them on held-out seeds
    (``study/registration.json``; docs/heldout.md): a linear probe reading the answer halfway from chance, and
    the per-token accuracy extrapolated to the level where the whole answer is right half the time. Neither reads
    RankMe: on the study's tasks, geometry lowered no forecast's error (docs/forecast-selection.md). They need
    ``probe_acc/`` series, ``val/token_acc`` and the run's ``chance`` in ``run_info``; a run without them leaves
    them out and says so once."""
    return [StudyRule(settings), ProbeCrossingRule(), ThresholdForecaster("token_acc", window=1.0)]


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
