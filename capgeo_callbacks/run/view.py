"""The run as its session sees it: one read-only view, built once per evaluation.

Whoever wants to know where a run stands reads this view: a progress bar, a stopper, a tuning adapter, the Hugging
Face callback. It holds the series so far (the accuracy, every recorded scalar and the measures' series, aligned on
the evaluation steps, with the acquisition step computed once, by the run's detection settings), the names they are
recorded under, the alerts so far, the forecasts the forecasters made at the latest evaluation (with the probability
of acquisition where one gives it), and the rules left out. Nobody reaches behind it into the session's tracker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from capgeo_callbacks.detection.alerts import Alert
from capgeo_callbacks.detection.settings import DetectionSettings
from capgeo_callbacks.keys import ACC, RunKeys, by_layer
from capgeo_callbacks.rules.base import Forecast, RunView

__all__ = ["SessionView"]


@dataclass(frozen=True)
class SessionView:
    """A run at its latest evaluation (module docstring).

    Attributes:
        run: the series so far, the run facts and the detection settings, as the rules see them.
        keys: the names the run's record is kept under.
        alerts: every rule's alerts so far, in the order raised.
        forecasts: each forecaster's forecast made at the latest evaluation, by rule (none made: not there).
        left_out: the rules left out for lack of their inputs, with the keys each lacks.
    """

    run: RunView
    keys: RunKeys = field(default_factory=RunKeys)
    alerts: tuple[Alert, ...] = ()
    forecasts: Mapping[str, Forecast] = field(default_factory=dict)
    left_out: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def empty(cls, keys: RunKeys, settings: DetectionSettings, info: Mapping[str, Any] | None = None) -> SessionView:
        """The view of a run not evaluated yet."""
        return cls(RunView((), {ACC: ()}, dict(info or {}), settings), keys)

    @property
    def steps(self) -> tuple[int, ...]:
        """The evaluation steps so far."""
        return self.run.steps

    @property
    def step(self) -> int | None:
        """The step of the latest evaluation (None before the first)."""
        return self.run.steps[-1] if self.run.steps else None

    @property
    def acc(self) -> float:
        """The monitored accuracy at the latest evaluation (NaN before the first)."""
        return self.run.last(ACC)

    @property
    def probabilities(self) -> dict[str, float]:
        """The probability of acquisition each forecaster that gives one gave at the latest evaluation, by rule."""
        return {rule: made.probability for rule, made in self.forecasts.items() if made.probability is not None}

    @property
    def acquired_step(self) -> int | None:
        """The acquisition step, once confirmed; None before."""
        return self.run.acquired_step if self.run.steps else None

    @property
    def settings(self) -> DetectionSettings:
        return self.run.settings

    @property
    def info(self) -> Mapping[str, Any]:
        return self.run.info

    def latest(self, tag: str) -> float:
        """The last finite value of series ``tag`` so far (NaN if none: a measure that skips evaluations keeps its
        latest value)."""
        return next((value for value in reversed(self.run.values(tag)) if math.isfinite(value)), math.nan)

    def layers(self, prefix: str | None = None) -> dict[str, float]:
        """The latest value of each layer's series under ``prefix`` (default: RankMe's), by layer, in depth order."""
        prefix = self.keys.rankme_prefix if prefix is None else prefix
        return by_layer({tag: self.latest(tag) for tag in self.run.tags(prefix)}, prefix)

    def progress(self) -> dict[str, str]:
        """What a progress bar shows of the run (Lightning's :class:`~capgeo_callbacks.StepProgressBar`, the
        Trainer's bar under the Hugging Face callback): the monitored accuracy, the deepest layer's RankMe, and the
        acquisition step once confirmed, else the forecast made at the latest evaluation with its interval."""
        figures: dict[str, str] = {}
        if self.steps:
            figures[self.keys.monitor] = f"{self.acc:.3f}"
        rankme = [(layer, value) for layer, value in self.layers().items() if math.isfinite(value)]
        if rankme:
            deepest, value = rankme[-1]
            figures[f"rankme {deepest}"] = f"{value:.1f}"
        if self.acquired_step is not None:
            figures["acquired"] = f"step {self.acquired_step}"
        elif self.forecasts:  # made at the latest evaluation: an older one may no longer stand
            latest = list(self.forecasts.values())[-1]
            interval = ("" if latest.low is None or latest.high is None else
                        f" [{latest.low:.0f}, {'inf' if math.isinf(latest.high) else f'{latest.high:.0f}'}]")
            figures[f"forecast ({latest.rule})"] = ("beyond reach" if math.isinf(latest.predicted)
                                                   else f"step {latest.predicted:.0f}{interval}")
        return figures
