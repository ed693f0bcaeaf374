"""Forecasters from the monitored accuracy alone: what a user without calibration runs, chance table or answer
length has, and what they would compare against (docs/design.md, "Forecasts").

- :class:`TrendForecaster` (``acc-trend``, capgeo's default): says nothing while the accuracy sits on its initial
  plateau; once it has left it, extrapolates the rise to the acquisition level, with an interval as wide as what it
  does not know (the curve's shape, its own fit, and how far such forecasts fell from the truth on capgeo's
  calibration runs).
- :class:`LastValueForecaster` (``acc-last``): persistence. Acquisition now if the accuracy is at the level, else
  never.
- :class:`LinearForecaster` (``acc-linear``): a straight line through the recent accuracy, to the level.

And one warning rule on the same reading of the accuracy: :class:`AccuracyOnsetRule` (``acc-onset``) warns once the
accuracy stands clear of its chance level, what a stopper asks of a run that records nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from capgeo_callbacks.detection.alerts import Alert
from capgeo_callbacks.detection.labels import Chance
from capgeo_callbacks.keys import ACC
from capgeo_callbacks.rules.base import Rule, RuleOutput, RunView
from capgeo_callbacks.rules.curves import recent
from capgeo_callbacks.rules.forecasters import ForecastRule, _crossing

__all__ = ["TREND_SPREAD", "AccuracyOnsetRule", "LastValueForecaster", "LinearForecaster", "TrendForecaster",
           "accuracy_so_far", "chance_and_noise", "weighted_line"]

# log(actual / predicted time to acquisition) of acc-trend's forecasts on study/corpus/calibration, at 25%, 50% and
# 75% of each acquired run's time to acquisition: the 10th and 90th percentiles, rounded out to 0.1
# (python -m study.record.user_forecast spread; docs/user-forecast.md)
TREND_SPREAD = (-0.7, 1.4)


def weighted_line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float, float] | None:
    """Weighted least squares ``y ~ a + b x``: (a, b, standard error of b), the residual variance estimated from the
    fit; None with fewer than 3 points or no spread in x."""
    if len(x) < 3 or np.ptp(x) <= 0 or w.sum() <= 0:
        return None
    w = w / w.mean()
    x_mean, y_mean = float((w * x).sum() / w.sum()), float((w * y).sum() / w.sum())
    sxx = float((w * (x - x_mean) ** 2).sum())
    slope = float((w * (x - x_mean) * (y - y_mean)).sum()) / sxx
    intercept = y_mean - slope * x_mean
    residual = y - (intercept + slope * x)
    variance = float((w * residual**2).sum()) / (len(x) - 2) if len(x) > 2 else 0.0
    return intercept, slope, math.sqrt(variance / sxx)


def accuracy_so_far(run: RunView) -> tuple[np.ndarray, np.ndarray]:
    """The steps and the monitored accuracy so far, step 0 (the initialised model) and missing values left out."""
    steps, acc = np.array(run.steps, dtype=float), np.array(run.values(ACC), dtype=float)
    keep = np.isfinite(acc) & (steps > 0)
    return steps[keep], acc[keep]


def chance_and_noise(run: RunView, early: np.ndarray, chance: float | None, floor: float) -> tuple[float, float]:
    """The accuracy of an answer that ignores the input (``chance`` if given, else the run's chance record's exact
    match, else the median of ``early``, the accuracy over the first half of the steps so far) and its noise: 1.4826 x
    the median absolute deviation of ``early`` from it, at least ``floor``."""
    if chance is not None:
        level = float(chance)
    else:
        record = run.info.get("chance")
        level = Chance.from_dict(record).exact if isinstance(record, dict) and record else float(np.median(early))
    return level, max(1.4826 * float(np.median(np.abs(early - level))), floor)


def _exp(value: float) -> float:
    return math.inf if value > 700 else math.exp(value)


def _logit(p: np.ndarray | float) -> np.ndarray | float:
    return np.log(p) - np.log1p(-p)


class TrendForecaster(ForecastRule):
    """The acquisition step from the accuracy's rise once it has left its initial plateau (module docstring).

    At each evaluation, on the accuracy so far (step 0 left out):

    1. chance ``c``: the one given, else the run's chance record (``exact``), else the median accuracy over the
       first half of the steps so far; its noise ``sigma``: 1.4826 x the median absolute deviation there, at
       least ``floor``.
    2. the plateau is left once the mean of the last three evaluations is ``units`` sigma above ``c`` and the
       last one 2 sigma, after at least ``plateau`` evaluations within 1 sigma of it. Before that: no forecast.
    3. from the last evaluation on the plateau, ``logit((acc - c) / (1 - c))`` is fitted as a line in the step and
       as a line in the log of the step (weighted by p(1 - p), the inverse of its binomial variance); each is
       extrapolated to the acquisition level. A rise that keeps its pace in the step reaches it first, one that
       slows as a power of the step last; the prediction is their geometric mean in the time to go.
    4. the interval holds both lines' crossings at their slopes +- ``t`` standard errors, and the time to go
       scaled by ``exp(spread)`` (how far these forecasts fell from the actual steps on capgeo's calibration runs).

    Args:
        horizon: see :class:`~capgeo_callbacks.rules.ForecastRule` (default None: it forecasts, it does not warn).
        threshold: see :class:`~capgeo_callbacks.rules.ForecastRule`.
        chance: the accuracy of an answer that ignores the input, if known (None: estimated from the run).
        units: how many noise units above chance the recent accuracy must stand.
        plateau: how many evaluations at chance there must have been.
        floor: the smallest noise, in accuracy (a rise of less than about ``units * floor`` is not one).
        spread: the log ratios (low, high) of actual to predicted time to go that the interval holds.
        t: the slope's standard errors the interval holds.

    Raises:
        ValueError: on a bad argument.
    """

    name = "acc-trend"

    def __init__(self, horizon: float | None = None, threshold: float = 0.5, chance: float | None = None,
                 units: float = 3.0, plateau: int = 8, floor: float = 0.01,
                 spread: Sequence[float] = TREND_SPREAD, t: float = 2.0) -> None:
        super().__init__(horizon, threshold)
        if chance is not None and not 0 <= chance < threshold:
            raise ValueError(f"chance must be in [0, threshold={threshold}), got {chance}")
        if units <= 0 or floor <= 0 or t < 0 or plateau < 3:
            raise ValueError(f"need units > 0, floor > 0, t >= 0 and plateau >= 3; got units={units}, floor={floor}, "
                             f"t={t}, plateau={plateau}")
        if len(spread) != 2 or not spread[0] <= 0 <= spread[1]:
            raise ValueError(f"spread must be (low <= 0, high >= 0) log ratios, got {spread!r}")
        self.chance, self.units, self.plateau = chance, float(units), int(plateau)
        self.floor, self.t = float(floor), float(t)
        self.spread = (float(spread[0]), float(spread[1]))

    def chance_of(self, run: RunView, early: np.ndarray) -> float:
        """The chance accuracy: given, recorded, or the median of ``early`` (the first half's accuracy)."""
        return chance_and_noise(run, early, self.chance, self.floor)[0]

    def forecast(self, run: RunView) -> tuple[float, float, float] | None:
        steps, acc = accuracy_so_far(run)
        if len(acc) < self.plateau + 4:
            return None
        early = acc[steps <= steps[-1] / 2]
        if len(early) < 3:
            return None
        chance, sigma = chance_and_noise(run, early, self.chance, self.floor)
        if chance + self.units * sigma >= self.threshold:
            return None  # chance too close to the level to tell a rise from noise
        if acc[-3:].mean() < chance + self.units * sigma or acc[-1] < chance + 2 * sigma:
            return None  # still on the plateau
        on_plateau = np.nonzero(acc <= chance + sigma)[0]
        if len(on_plateau) < self.plateau:
            return None  # no plateau to have left (a rise from the first steps)
        start = min(int(on_plateau[-1]), len(acc) - 4)
        span = 1.0 - chance
        share = np.clip((acc[start:] - chance) / span, sigma / span / 2, 1 - 1e-3)
        goal = float(_logit((self.threshold - chance) / span))
        now = float(steps[-1])
        crossings = []
        for x, to_step in ((steps[start:], float), (np.log(steps[start:]), _exp)):
            fit = weighted_line(x, _logit(share), share * (1 - share))
            if fit is None:
                return None
            intercept, slope, error = fit
            level = intercept + slope * float(x[-1])
            if level >= goal:
                return now, now, now
            crossings.append(tuple(math.inf if rate <= 0 else to_step(float(x[-1]) + (goal - level) / rate)
                                   for rate in (slope, slope + self.t * error, slope - self.t * error)))
        (linear, linear_low, linear_high), (power, power_low, power_high) = crossings
        low, high = min(linear_low, power_low), max(linear_high, power_high)
        if not (math.isfinite(linear) and math.isfinite(power)):
            return math.inf, low, math.inf
        to_go = math.sqrt((linear - now) * (power - now))
        return (now + to_go, min(low, now + to_go * math.exp(self.spread[0])),
                max(high, now + to_go * math.exp(self.spread[1])))


class LastValueForecaster(ForecastRule):
    """Persistence: acquisition at this step if the accuracy is at the level, else not within reach."""

    name = "acc-last"

    def forecast(self, run: RunView) -> tuple[float, float, float] | None:
        values = [value for value in run.values(ACC) if math.isfinite(value)]
        if not values:
            return None
        now = float(run.step)
        return (now, now, now) if values[-1] >= self.threshold else (math.inf, math.inf, math.inf)


class LinearForecaster(ForecastRule):
    """A straight line through the accuracy over the last ``window`` share of the steps so far, to the level, with
    the interval from the slope's 90% t-interval.

    Args:
        horizon: see :class:`~capgeo_callbacks.rules.ForecastRule`.
        threshold: see :class:`~capgeo_callbacks.rules.ForecastRule`.
        window: the share of the steps so far the line is fitted on (the most recent).
    """

    name = "acc-linear"

    def __init__(self, horizon: float | None = 300, threshold: float = 0.5, window: float = 0.5) -> None:
        super().__init__(horizon, threshold)
        if not 0 < window <= 1:
            raise ValueError(f"window must be in (0, 1], got {window}")
        self.window = float(window)

    def forecast(self, run: RunView) -> tuple[float, float, float] | None:
        x, y = recent(run, ACC, self.window, 0)
        return _crossing(x, -y, -self.threshold, float(run.step))  # rising accuracy = falling -accuracy


class AccuracyOnsetRule(Rule):
    """Warns once the monitored accuracy stands clear of its chance level: the mean of the last three evaluations
    ``units`` noise units above it and the last one 2 (chance and noise as :class:`TrendForecaster` reads them: the
    chance given, the run's chance record, or the median accuracy over the first half of the steps so far). The
    learning onset of a run that records nothing but its accuracy.

    Args:
        chance: the accuracy of an answer that ignores the input, if known (None: recorded, else estimated).
        units: how many noise units above chance the recent accuracy must stand.
        floor: the smallest noise, in accuracy.

    Raises:
        ValueError: on a bad argument.
    """

    name = "acc-onset"

    def __init__(self, chance: float | None = None, units: float = 3.0, floor: float = 0.01) -> None:
        if units <= 0 or floor <= 0 or (chance is not None and not 0 <= chance < 1):
            raise ValueError(f"need units > 0, floor > 0 and chance in [0, 1) or None; got units={units}, "
                             f"floor={floor}, chance={chance}")
        self.chance, self.units, self.floor = chance, float(units), float(floor)

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        steps, acc = accuracy_so_far(run)
        early = acc[steps <= steps[-1] / 2] if len(acc) else acc
        if raised or len(acc) < 3 or len(early) < 3:
            return RuleOutput()
        chance, sigma = chance_and_noise(run, early, self.chance, self.floor)
        if acc[-3:].mean() < chance + self.units * sigma or acc[-1] < chance + 2 * sigma:
            return RuleOutput()
        return RuleOutput(alerts=[self.alert(run, f"the accuracy left its chance level {chance:.3f} "
                                                  f"({acc[-3:].mean():.3f} over the last three evaluations)")])

    def settings(self) -> dict[str, Any]:
        return {"chance": self.chance, "units": self.units, "floor": self.floor}
