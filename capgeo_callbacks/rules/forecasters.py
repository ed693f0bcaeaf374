"""Forecasters: the predicted acquisition step, with an interval, at every evaluation.

Each is a :class:`~capgeo_callbacks.rules.Rule` whose output carries a :class:`Forecast`, and raises one alert
when its forecast first puts acquisition within ``horizon`` steps (a warning with a lead the user chooses).
``math.inf`` means "not within reach": no progress, or beyond ``REACH`` times the budget. They follow
scikit-learn's estimator convention: settings in the constructor (``get_params`` round-trips), and what a
forecaster learns from calibration runs set by ``fit(runs)`` in attributes ending in ``_``.

- :class:`ClockForecaster`: the median acquisition step of earlier runs of the same task and level (a table,
  fitted on calibration runs), whatever the run does.
- :class:`ThresholdForecaster`: extrapolates a smooth per-token quantity to the level at which the whole answer
  is right half the time (Du et al. 2024: capabilities emerge below a loss threshold; Schaeffer et al. 2023:
  exact match is a sharp readout of smooth per-token quantities). ``token_acc``: the per-token error rate,
  extrapolated as a straight line in log error over the recent evaluations, to ``1 - 0.5 ** (1 / T)`` (T answer
  tokens: independent errors give exact match 0.5 there). ``logprob``: the per-token loss, in log loss, to
  ``-log(0.5) / T``. Both thresholds can instead be read off calibration runs (``targets``).
- :class:`CurveForecaster`: the parametric learning-curve families of Domhan et al. (2015) fitted to the per-token
  accuracy with ``scipy.optimize.curve_fit``; the prediction is where the fitted curve crosses the same level,
  the interval the spread over families and over parameter draws from each fit's covariance.
- :class:`RidgeForecaster`: a ridge regression of log(acquisition step) on features of the run so far (the
  step, accuracy, per-token accuracy, log-prob, the clock, and optionally RankMe), fitted on calibration runs.

What a user without calibration runs would compare against, from the monitored accuracy alone:

- :class:`TrendForecaster` (``acc-trend``, the default): nothing while the accuracy sits on its initial plateau;
  once it has left it, the rise in logit is extrapolated to the acquisition level as a line in the step and as a line
  in the log of the step, the prediction between the two, the interval around both, widened by the spread of such
  forecasts on capgeo's calibration runs (docs/design.md, "Forecasts").
- :class:`LastValueForecaster` (``acc-last``): acquisition now if the accuracy is at the level, else never.
- :class:`LinearForecaster` (``acc-linear``): a straight line through the recent accuracy, to the level.
- ``loss-threshold``: :class:`ThresholdForecaster` on ``val/loss``, to ``-log(0.5) / T`` without calibration.
"""

from __future__ import annotations

import inspect
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from capgeo_callbacks.detection.alerts import Alert
from capgeo_callbacks.detection.labels import Chance
from capgeo_callbacks.keys import ACC, LOGPROB, RANKME, TOKEN_ACC, VAL_LOSS
from capgeo_callbacks.rules.base import Forecast, Needs, Rule, RuleOutput, RunView
from capgeo_callbacks.rules.curves import FAMILIES, REACH, fit_curve_families, recent

__all__ = ["ClockForecaster", "CurveForecaster", "ForecastRule", "RidgeForecaster", "ThresholdForecaster",
           "answer_tokens", "half_right_level"]



def answer_tokens(run: RunView) -> float | None:
    """Answer tokens per question: the run fact ``answer_tokens``, else from the run's chance record (None if
    unknown)."""
    given = run.info.get("answer_tokens")
    if isinstance(given, (int, float)) and not isinstance(given, bool) and given > 0:
        return float(given)
    chance = run.info.get("chance")
    if not isinstance(chance, Mapping) or not chance:
        return None
    values = Chance.from_dict(chance)
    return values.tokens / values.questions if values.questions else None


def half_right_level(tokens: float, threshold: float = 0.5) -> float:
    """Per-token accuracy at which a T-token answer is wholly right with probability ``threshold``, if its tokens
    are right independently: ``threshold ** (1 / T)``."""
    return threshold ** (1.0 / tokens)


def _key(run: RunView) -> str:
    return f"{run.info.get('task')}/{run.info.get('difficulty')}"


CalibrationRuns = Sequence[tuple[RunView, int | None]]
"""Finished runs and their acquisition steps (None: not acquired), what ``fit`` learns from."""


class ForecastRule(Rule):
    """Base of the forecasters: ``forecast(run)`` gives (predicted, low, high); the warning fires once when the
    prediction first comes within ``horizon`` steps, before acquisition.

    Settings are the constructor's arguments (:meth:`get_params`); what ``fit`` learns is named in ``fitted``
    (each held in the attribute of that name with a trailing ``_``, with its value before fitting). Both are in
    :meth:`settings`, so a fitted forecaster is frozen and rebuilt whole (:meth:`from_settings`).

    Args:
        horizon: warn when the forecast puts acquisition within this many steps (None: never warn).
        threshold: the acquisition accuracy the forecast extrapolates to (as the detection settings). Whether the
            run has acquired is the view's (:attr:`~capgeo_callbacks.rules.RunView.acquired_step`).
    """

    name = "forecast"
    fitted: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, horizon: float | None = 300, threshold: float = 0.5) -> None:
        if horizon is not None and horizon < 0:
            raise ValueError(f"horizon must be >= 0 steps or None, got {horizon}")
        self.horizon, self.threshold = horizon, threshold

    def get_params(self) -> dict[str, Any]:
        """The constructor's arguments as set: ``type(f)(**f.get_params())`` is the same forecaster, unfitted."""
        names = [name for name in inspect.signature(type(self).__init__).parameters if name != "self"]
        return {name: getattr(self, name) for name in names}

    def fit(self, runs: CalibrationRuns) -> ForecastRule:
        """Learn from calibration runs (those that need it); returns ``self``."""
        raise NotImplementedError(f"{type(self).__name__} learns nothing from calibration runs")

    def forecast(self, run: RunView) -> tuple[float, float, float] | None:
        raise NotImplementedError

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        if run.acquired_step is not None:
            return RuleOutput()
        found = self.forecast(run)
        if found is None:
            return RuleOutput()
        predicted, low, high = found
        cap = REACH * (run.max_steps or 0) or 10 * max(run.step, 1)
        if predicted > cap:
            predicted, high = math.inf, math.inf
        forecast = Forecast(self.name, run.step, predicted, low, high).ahead()
        alerts = []
        if not raised and self.horizon is not None and forecast.within(self.horizon):
            alerts.append(self.alert(run, f"forecast puts acquisition at step {forecast.predicted:.0f} "
                                          f"[{forecast.low:.0f}, {forecast.high:.0f}], within {self.horizon:g} steps"))
        return RuleOutput(alerts=alerts, forecast=forecast)

    def settings(self) -> dict[str, Any]:
        params = {key: list(value) if isinstance(value, tuple) else value for key, value in self.get_params().items()}
        learned = {name: getattr(self, f"{name}_", unfitted) for name, unfitted in self.fitted.items()}
        return {**params, **learned}

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ForecastRule:
        rule = cls(**{key: value for key, value in settings.items() if key not in cls.fitted})
        learned = {name: settings[name] for name in cls.fitted if name in settings}
        if learned:
            rule.set_fitted(**learned)
        return rule

    def set_fitted(self, **learned: Any) -> None:
        """Set what ``fit`` learns (by the names in ``fitted``), as ``fit`` does."""
        for name, value in learned.items():
            setattr(self, f"{name}_", value)


class ClockForecaster(ForecastRule):
    """Predicts the median acquisition step of calibration runs of the same task and level.

    Args:
        horizon: see :class:`ForecastRule`.
        threshold: see :class:`ForecastRule`.

    Attributes:
        table_: ``{"task/difficulty": [acquisition steps of calibration runs]}``, set by :meth:`fit`.
    """

    name = "clock"
    needs = Needs(facts=("task", "difficulty"))
    fitted: ClassVar[Mapping[str, Any]] = {"table": {}}

    def fit(self, runs: CalibrationRuns) -> ClockForecaster:
        """From finished runs and their acquisition steps (None: not acquired; left out)."""
        table: dict[str, list[float]] = {}
        for run, acquired in runs:
            if acquired is not None:
                table.setdefault(_key(run), []).append(float(acquired))
        self.set_fitted(table=table)
        return self

    def set_fitted(self, table: Mapping[str, Sequence[float]]) -> None:  # type: ignore[override]
        self.table_ = {key: [float(v) for v in values] for key, values in table.items()}

    def forecast(self, run: RunView) -> tuple[float, float, float] | None:
        steps = getattr(self, "table_", {}).get(_key(run))
        if not steps:
            return None
        return statistics.median(steps), min(steps), max(steps)


def _crossing(x: np.ndarray, z: np.ndarray, target: float, now: float) -> tuple[float, float, float] | None:
    """Where the least-squares line through (x, z) reaches ``target`` (z falling towards it), with the interval
    from the slope's 90% t-interval. None when there is too little to fit."""
    if len(x) < 4 or np.ptp(x) <= 0:
        return None
    slope, intercept = np.polyfit(x, z, 1)
    if z[-1] <= target:
        return now, now, now
    residual = z - (slope * x + intercept)
    spread = math.sqrt(float(residual @ residual) / max(1, len(x) - 2))
    slope_se = spread / math.sqrt(float(((x - x.mean()) ** 2).sum()))
    t90 = 1.7 if len(x) > 20 else 2.0
    level_now = slope * now + intercept

    def reach(rate: float) -> float:
        return math.inf if rate >= 0 else now + (target - level_now) / rate

    return reach(slope), reach(slope - t90 * slope_se), reach(slope + t90 * slope_se)


class ThresholdForecaster(ForecastRule):
    """Extrapolates per-token accuracy or loss to the acquisition level (module docstring).

    Args:
        quantity: ``token_acc`` (from ``val/token_acc``), ``logprob`` (from ``val/logprob``) or ``loss`` (from
            ``val/loss``, the cross-entropy per target token: minus the log-prob, to ``-log(0.5) / T`` with T the
            run's ``answer_tokens`` or its chance record's, else 1; no calibration).
        window: the share of the steps so far the line is fitted on (the most recent).
        horizon: see :class:`ForecastRule`.
        threshold: see :class:`ForecastRule`.

    Attributes:
        targets_: ``{"task/difficulty": level}`` read off calibration runs by :meth:`fit`; without an entry (or
            unfitted), the independent-errors level from the answer length in the run's ``chance``.
    """

    fitted: ClassVar[Mapping[str, Any]] = {"targets": {}}
    TAGS: ClassVar[Mapping[str, str]] = {"token_acc": TOKEN_ACC, "logprob": LOGPROB, "loss": VAL_LOSS}

    def __init__(self, quantity: str = "token_acc", window: float = 0.5, horizon: float | None = 300,
                 threshold: float = 0.5) -> None:
        super().__init__(horizon, threshold)
        if quantity not in self.TAGS:
            raise ValueError(f"quantity must be one of {', '.join(self.TAGS)}, got {quantity!r}")
        if not 0 < window <= 1:
            raise ValueError(f"window must be in (0, 1], got {window}")
        self.quantity, self.window = quantity, float(window)
        self.name = f"{quantity}-threshold"

    @property
    def tag(self) -> str:
        return self.TAGS[self.quantity]

    @property
    def needs(self) -> Needs:  # type: ignore[override]
        if getattr(self, "targets_", None):
            return Needs(series=(ACC, self.tag), facts=("task", "difficulty"))
        return Needs(series=(ACC, self.tag), facts=() if self.quantity == "loss" else ("chance",))

    def fit(self, runs: CalibrationRuns) -> ThresholdForecaster:
        """The level of ``quantity`` at acquisition, median over the calibration runs of each task and level."""
        levels: dict[str, list[float]] = {}
        for run, acquired in runs:
            if acquired is not None and acquired in run.steps:
                value = run.values(self.tag)[run.steps.index(acquired)]
                if math.isfinite(value):
                    levels.setdefault(_key(run), []).append(value)
        self.set_fitted(targets={key: statistics.median(v) for key, v in levels.items()})
        return self

    def set_fitted(self, targets: Mapping[str, float]) -> None:  # type: ignore[override]
        self.targets_ = {key: float(value) for key, value in targets.items()}
        self.name = f"{self.quantity}-threshold" + ("-calibrated" if self.targets_ else "")

    def target(self, run: RunView) -> float | None:
        targets = getattr(self, "targets_", {})
        if _key(run) in targets:
            return targets[_key(run)]
        tokens = answer_tokens(run)
        if tokens is None and self.quantity == "loss":
            tokens = 1.0  # without calibration or an answer length: a one-token answer
        if tokens is None:
            return None
        level = half_right_level(tokens, self.threshold)
        return {"token_acc": level, "logprob": math.log(level), "loss": -math.log(level)}[self.quantity]

    def forecast(self, run: RunView) -> tuple[float, float, float] | None:
        target = self.target(run)
        if target is None:
            return None
        x, y = recent(run, self.tag, self.window, run.warmup_steps or 0)
        # each quantity approaches 0 error / 0 loss: fit a line to the log of the error (or of the loss)
        error = {"token_acc": 1 - y, "logprob": -y, "loss": y}[self.quantity]
        goal = {"token_acc": 1 - target, "logprob": -target, "loss": target}[self.quantity]
        keep = error > 0
        if goal <= 0:
            return None
        return _crossing(x[keep], np.log(error[keep]), math.log(goal), float(run.step))


class CurveForecaster(ForecastRule):
    """Domhan et al.'s curve families fitted to exact-match accuracy (module docstring).

    Refitted every ``every`` evaluations, on the evaluations up to the last multiple of it, so that a live run pays
    for a fit only that often; the fit is a pure function of what it reads, remembered by
    :func:`fit_curve_families`, so a replay says the same and the forecaster itself holds nothing.

    Args:
        families: which of :data:`~capgeo_callbacks.rules.curves.FAMILIES` to fit.
        draws: parameter draws per fit for the interval.
        horizon: see :class:`ForecastRule`.
        seed: the draws' random seed (forecasts are reproducible).
        every: evaluations between refits.
        threshold: see :class:`ForecastRule`.
    """

    name = "curve-families"

    def __init__(self, families: Sequence[str] = tuple(FAMILIES), draws: int = 64, horizon: float | None = 300,
                 seed: int = 0, every: int = 8, threshold: float = 0.5) -> None:
        super().__init__(horizon, threshold)
        unknown = [name for name in families if name not in FAMILIES]
        if unknown or not families:
            raise ValueError(f"unknown curve families {unknown}; valid: {', '.join(FAMILIES)}")
        if every < 1:
            raise ValueError(f"every must be >= 1 evaluation, got {every}")
        self.families, self.draws, self.seed, self.every = tuple(families), int(draws), int(seed), int(every)

    def forecast(self, run: RunView) -> tuple[float, float, float] | None:
        fitted = run.prefix(len(run.steps) - len(run.steps) % self.every) if len(run.steps) >= self.every else run
        return fit_curve_families(fitted.steps, fitted.values(ACC), fitted.max_steps, fitted.warmup_steps,
                                  self.families, self.draws, self.seed, self.threshold)


def run_features(run: RunView, clock: float | None, geometry: bool) -> list[float]:
    """Features of the run so far for :class:`RidgeForecaster` (all finite): the log step, the latest accuracy,
    per-token accuracy and log-prob, the log of the clock's prediction (not before the step), and with
    ``geometry`` each layer's RankMe relative to its start and to its minimum so far."""
    step = max(run.step, 1)
    last = lambda tag, default: next((v for v in reversed(run.values(tag)) if math.isfinite(v)), default)  # noqa: E731
    features = [math.log(step), last(ACC, 0.0), last(TOKEN_ACC, 0.0), last(LOGPROB, -5.0),
                math.log(max(clock, run.step)) if clock else math.log(step)]
    if geometry:
        for tag in run.tags(RANKME):
            values = [v for v in run.values(tag) if math.isfinite(v)]
            if values:  # RankMe relative to its start and to its minimum so far: scale-free
                features += [math.log(values[-1] / values[0]), math.log(values[-1] / min(values))]
            else:
                features += [0.0, 0.0]
    return features


class RidgeForecaster(ForecastRule):
    """A ridge regression of log(acquisition step) on :func:`run_features`, fitted on calibration runs.

    Args:
        geometry: whether RankMe features are used.
        penalty: the ridge penalty (not on the intercept).
        fractions: the shares of each run's time to acquisition at which it gives a training row.
        horizon: see :class:`ForecastRule`.
        threshold: see :class:`ForecastRule`.

    Attributes:
        weights_: the fitted coefficients (intercept last); None before :meth:`fit`.
        scale_: the residual spread in log steps (the interval is +-1.645 of it).
        clock_: the :class:`ClockForecaster` table of the clock feature.
    """

    fitted: ClassVar[Mapping[str, Any]] = {"weights": None, "scale": 0.3, "clock": {}}

    def __init__(self, geometry: bool = False, penalty: float = 1.0,
                 fractions: Sequence[float] = (0.1, 0.25, 0.5, 0.75), horizon: float | None = 300,
                 threshold: float = 0.5) -> None:
        super().__init__(horizon, threshold)
        self.geometry, self.penalty, self.fractions = bool(geometry), float(penalty), tuple(fractions)
        self.name = "ridge" + ("-geometry" if geometry else "")

    def fit(self, runs: CalibrationRuns) -> RidgeForecaster:
        """Fitted on every acquired run at ``fractions`` of its time to acquisition."""
        clock = ClockForecaster().fit(runs)
        rows, targets = [], []
        for run, acquired in runs:
            if acquired is None:
                continue
            for fraction in self.fractions:
                end = max(1, sum(1 for s in run.steps if s <= fraction * acquired))
                view = run.prefix(end)
                clock_step = clock.forecast(view)
                rows.append(run_features(view, clock_step[0] if clock_step else None, self.geometry))
                targets.append(math.log(acquired))
        if len({len(row) for row in rows}) > 1:  # runs with different layer counts: geometry features don't line up
            width = min(len(row) for row in rows)
            rows = [row[:width] for row in rows]
        x = np.hstack([np.array(rows), np.ones((len(rows), 1))])
        y = np.array(targets)
        penalty_matrix = self.penalty * np.eye(x.shape[1])
        penalty_matrix[-1, -1] = 0.0
        weights = np.linalg.solve(x.T @ x + penalty_matrix, x.T @ y)
        residual = y - x @ weights
        scale = float(np.sqrt(residual @ residual / max(1, len(y) - x.shape[1])))
        self.set_fitted(weights=weights.tolist(), scale=scale, clock=clock.table_)
        return self

    def set_fitted(self, weights: Sequence[float] | None, scale: float, clock: Mapping[str, Sequence[float]]
                   ) -> None:  # type: ignore[override]
        self.weights_ = None if weights is None else [float(w) for w in weights]
        self.scale_ = float(scale)
        self.clock_ = ClockForecaster()
        self.clock_.set_fitted(table=clock)

    def settings(self) -> dict[str, Any]:
        settings = super().settings()
        if isinstance(settings["clock"], ClockForecaster):
            settings["clock"] = settings["clock"].table_
        return settings

    def forecast(self, run: RunView) -> tuple[float, float, float] | None:
        weights = getattr(self, "weights_", None)
        if weights is None:
            return None
        clock_step = self.clock_.forecast(run)
        features = run_features(run, clock_step[0] if clock_step else None, self.geometry)[: len(weights) - 1]
        if len(features) != len(weights) - 1:
            return None
        log_step = float(np.dot(features, weights[:-1]) + weights[-1])
        spread = 1.645 * self.scale_
        return math.exp(log_step), math.exp(log_step - spread), math.exp(log_step + spread)
