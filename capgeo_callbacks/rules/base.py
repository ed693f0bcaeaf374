"""The rule protocol: what a warning rule or a forecaster is, and how one is run over a run's series.

A rule reads a run's series as they arrive. At each evaluation it is called with a :class:`RunView` of the
series so far and the alerts it has already raised, and returns the alerts it raises now and, if it forecasts,
its :class:`Forecast` of the acquisition step. It may keep no other state: its output is a function of the
prefix and of its own alerts, so a rule replayed offline on a finished run (:func:`replay`) says exactly what
it said live (the tracker, :class:`~capgeo_callbacks.detection.RunTracker`, calls it the same way).

Writing a rule::

    class AccuracyAbove(Rule):
        name = "acc-above-0.3"

        def update(self, run, raised):
            if not raised and run.last("acc") >= 0.3:
                return RuleOutput(alerts=[self.alert(run, "accuracy reached 0.3")])
            return RuleOutput()

and it is scored like every other rule: ``python -m capgeo_callbacks.scoring RUNS --rules acc-above-0.3``
once registered (:func:`~capgeo_callbacks.rules.register_rule`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from capgeo_callbacks.detection.alerts import Alert
from capgeo_callbacks.detection.series import Points

__all__ = ["Forecast", "Rule", "RuleOutput", "RunView", "replay"]


@dataclass(frozen=True)
class RunView:
    """A run's series up to an evaluation, aligned on its evaluation steps (NaN where a value is missing).

    Attributes:
        steps: the evaluation steps so far (those of the accuracy series).
        series: every series by tag: ``acc`` (the monitored accuracy), ``val/logprob``, ``val/token_acc``,
            ``val/loss``, ``train/loss``, ``lr``, ``rankme/<layer>``, ``probe_acc/<layer>``, ...
        info: what is known of the run before it starts: ``task``, ``difficulty``, ``max_steps``,
            ``warmup_steps``, ``chance`` (the input-independent answer's scores), ``seed``... Any may be missing.
    """

    steps: tuple[int, ...]
    series: Mapping[str, tuple[float, ...]]
    info: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_points(cls, acc: Points, series: Mapping[str, Points], info: Mapping[str, Any] | None = None) -> RunView:
        """A view from ``[[step, value], ...]`` series; the steps are the accuracy's."""
        steps = tuple(int(p[0]) for p in acc)
        aligned = {"acc": tuple(float(p[1]) for p in acc)}
        for tag, points in series.items():
            if tag != "acc":
                at = {int(p[0]): float(p[1]) for p in points if p[1] is not None}
                aligned[tag] = tuple(at.get(step, math.nan) for step in steps)
        return cls(steps, aligned, dict(info or {}))

    def prefix(self, end: int) -> RunView:
        """The view at the ``end``-th evaluation (the first ``end`` evaluations)."""
        return RunView(self.steps[:end], {tag: values[:end] for tag, values in self.series.items()}, self.info)

    @property
    def step(self) -> int:
        """The step of the latest evaluation."""
        return self.steps[-1]

    def values(self, tag: str) -> tuple[float, ...]:
        """The series ``tag`` at every evaluation so far (all NaN if the run has no such series)."""
        return self.series.get(tag, (math.nan,) * len(self.steps))

    def last(self, tag: str) -> float:
        return self.values(tag)[-1] if self.steps else math.nan

    def tags(self, prefix: str) -> list[str]:
        """The tags starting with ``prefix``, in the order the run recorded them."""
        return [tag for tag in self.series if tag.startswith(prefix)]

    @property
    def max_steps(self) -> int | None:
        value = self.info.get("max_steps")
        return None if value is None else int(value)

    @property
    def warmup_steps(self) -> int | None:
        value = self.info.get("warmup_steps")
        return None if value is None else int(value)


@dataclass(frozen=True)
class Forecast:
    """A forecast of the acquisition step, made at ``step``.

    Attributes:
        rule: the forecaster's name.
        step: the evaluation step at which it was made.
        predicted: the predicted acquisition step; ``math.inf`` when it is not expected within reach (beyond
            the budget, or no progress); None when the forecaster has no forecast yet.
        low: lower end of the interval (None: none).
        high: upper end of the interval (``math.inf`` allowed).
    """

    rule: str
    step: int
    predicted: float | None
    low: float | None = None
    high: float | None = None

    def within(self, horizon: float) -> bool:
        """Whether it puts acquisition within ``horizon`` steps of ``step``."""
        return self.predicted is not None and math.isfinite(self.predicted) and self.predicted - self.step <= horizon

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "step": self.step, "predicted": self.predicted, "low": self.low,
                "high": self.high}


@dataclass(frozen=True)
class RuleOutput:
    """What a rule says at one evaluation: the alerts it raises now, and its forecast (if it forecasts)."""

    alerts: tuple[Alert, ...] | list[Alert] = ()
    forecast: Forecast | None = None


class Rule(ABC):
    """A warning rule, or a forecaster (module docstring). Subclasses set ``name`` and implement ``update``.

    Attributes:
        name: how summaries, logs and tables name the rule (unique among a tracker's rules).
        needs: the series tags (or tag prefixes ending in ``/``) it reads; a run without them gets no output.
    """

    name: ClassVar[str] = "rule"
    needs: ClassVar[tuple[str, ...]] = ("acc",)

    @abstractmethod
    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        """The rule's output at the latest evaluation of ``run``, given the alerts it raised before."""

    def settings(self) -> dict[str, Any]:
        """The rule's settings as a JSON-able dict (what a registration file freezes); ``from_settings`` of the
        same class rebuilds the rule from it."""
        return {}

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> Rule:
        """The rule :meth:`settings` describes."""
        return cls(**settings)

    def alert(self, run: RunView, evidence: str, layer: str = "") -> Alert:
        """A run alert of this rule at the latest evaluation, with its evidence in words."""
        return Alert("run", layer, run.step, None, None, None, rule=self.name, evidence=evidence)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings()})"


def replay(rule: Rule, run: RunView, until: int | None = None) -> tuple[list[Alert], list[Forecast]]:
    """Every alert and forecast ``rule`` would have emitted live on ``run``, evaluation by evaluation
    (up to the ``until``-th evaluation)."""
    alerts: list[Alert] = []
    forecasts: list[Forecast] = []
    for end in range(1, (len(run.steps) if until is None else until) + 1):
        output = rule.update(run.prefix(end), alerts)
        alerts += output.alerts
        if output.forecast is not None:
            forecasts.append(output.forecast)
    return alerts, forecasts
