"""The live probability of acquisition within the budget, and the acquisition step, from a survival model.

"Will this run acquire the capability within its budget, and when?" is a question about a time to an event that
some runs never reach: a run not acquired by its budget is a censored observation, not a missing one. So the
time to acquisition is modelled as survival (docs/design.md, "The probability of acquisition"):

- **Landmarks.** Each calibration run gives one row at each share of its budget in ``landmarks`` (5%, 10%, ...,
  95%) at which it has not yet acquired: the run's features there (:func:`survival_features`), and the time from
  there to acquisition as a share of the budget, observed if it acquired within the budget, censored at the
  budget's end if not (landmarking: van Houwelingen 2007).
- **The model.** A Weibull accelerated-failure-time model fitted on those rows by lifelines
  (``WeibullAFTFitter``, with a small ridge penalty): ``S(u | x) = exp(-(u / lambda(x)) ** rho)``,
  ``log lambda(x) = b + w . x``. The fitted coefficients are plain numbers (:meth:`SurvivalForecaster.settings`),
  so the live rule needs neither lifelines nor pandas: only fitting does (``pip install
  "capgeo-callbacks[stats]"``).
- **At an evaluation** at step t of a budget B, with u = (B - t) / B left: ``P(acquired by B) = 1 - S(u | x)``;
  the forecast step is ``t + B * median``, its interval the 10th and 90th percentiles of the same distribution.

The features are the run's own series and its budget (the elapsed share, the accuracy and its recent slope, the
loss's fall and slope, the weight norm's change and slope): never a setting such as the task, the size or the
learning rate, so the rule runs on a user's run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from capgeo_callbacks.detection.alerts import Alert
from capgeo_callbacks.detection.events import detect_acquisition
from capgeo_callbacks.keys import ACC, LOGPROB, VAL_LOSS, WEIGHT_NORM
from capgeo_callbacks.rules.base import Forecast, Needs, RuleOutput, RunView
from capgeo_callbacks.rules.forecasters import CalibrationRuns, ForecastRule

__all__ = ["FEATURES", "LANDMARKS", "SurvivalForecaster", "landmark_rows", "survival_features"]

GLOBAL_NORM = f"{WEIGHT_NORM}global"
# feature -> the series it reads (alternatives with "|")
FEATURES: Mapping[str, str] = {
    "elapsed": ACC,  # t / B
    "acc": ACC,  # mean of the last three evaluations
    "acc_gain": ACC,  # that minus the accuracy at the first evaluation (the run's own chance level)
    "acc_slope": ACC,  # least-squares slope over the last tenth of the budget, per budget
    "loss_drop": f"{VAL_LOSS}|{LOGPROB}",  # log of the first loss over the current one
    "loss_slope": f"{VAL_LOSS}|{LOGPROB}",  # minus the slope of the log loss over the last tenth, per budget
    "norm_change": GLOBAL_NORM,  # log of the current weight norm over the first
    "norm_slope": GLOBAL_NORM,  # the slope of the log weight norm over the last tenth, per budget
}
LANDMARKS = tuple(round(0.05 * k, 2) for k in range(1, 20))  # 5%, 10%, ..., 95% of the budget
WINDOW = 0.1  # the share of the budget the slopes are taken over
QUANTILES = (0.1, 0.9)  # the forecast's interval


def _mean_last(values: np.ndarray, count: int = 3) -> float:
    finite = values[np.isfinite(values)]
    return float(finite[-count:].mean()) if len(finite) else math.nan


def _first(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite[0]) if len(finite) else math.nan


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    keep = np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 2 or np.ptp(x) <= 0:
        return 0.0
    return float(np.polyfit(x, y, 1)[0])


def _log(values: Sequence[float]) -> np.ndarray:
    array = np.array(values, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(array > 0, np.log(np.where(array > 0, array, 1.0)), np.nan)


def survival_features(run: RunView, budget: float, names: Sequence[str] = tuple(FEATURES),
                      loss_key: str = VAL_LOSS) -> dict[str, float]:
    """The features of ``run`` at its latest evaluation, for a budget of ``budget`` steps (module docstring). A
    feature whose series the run lacks, or has no finite value of yet, is NaN. ``loss_key``: the loss the two loss
    features read (the validation loss, else minus the log-prob; another, such as ``train/loss``, alone)."""
    steps = np.array(run.steps, dtype=float)
    share = steps / budget
    recent = share >= share[-1] - WINDOW
    acc = np.array(run.values(ACC), dtype=float)
    loss = np.array(run.values(loss_key), dtype=float)
    if loss_key == VAL_LOSS and not np.isfinite(loss).any():
        loss = -np.array(run.values(LOGPROB), dtype=float)
    log_loss, log_norm = _log(loss), _log(run.values(GLOBAL_NORM))
    every = {
        "elapsed": float(share[-1]),
        "acc": _mean_last(acc),
        "acc_gain": _mean_last(acc) - _first(acc),
        "acc_slope": _slope(share[recent], acc[recent]),
        "loss_drop": _first(log_loss) - _mean_last(log_loss),
        "loss_slope": -_slope(share[recent], log_loss[recent]),
        "norm_change": _mean_last(log_norm, 1) - _first(log_norm),
        "norm_slope": _slope(share[recent], log_norm[recent]),
    }
    return {name: every[name] for name in names}


def landmark_rows(runs: CalibrationRuns, names: Sequence[str], landmarks: Sequence[float] = LANDMARKS,
                  threshold: float = 0.5, patience: int = 3) -> list[dict[str, float]]:
    """The survival rows of ``runs`` (module docstring): for each run with a budget (``max_steps``) and each landmark
    it has not acquired by, its features there, ``duration`` (the share of the budget from there to acquisition, or
    to the budget's end) and ``event`` (1: acquired within the budget, 0: censored). Rows with a non-finite feature
    are left out."""
    rows: list[dict[str, float]] = []
    for run, acquired in runs:
        budget = run.max_steps
        if not budget:
            continue
        for landmark in landmarks:
            end = sum(1 for step in run.steps if step <= landmark * budget)
            if end < 2:
                continue
            view = run.prefix(end)
            if detect_acquisition(view.steps, view.values(ACC), threshold, patience) is not None:
                break
            features = survival_features(view, budget, names)
            if not all(math.isfinite(value) for value in features.values()):
                continue
            event = acquired is not None and acquired <= budget
            left = ((acquired if event else budget) - view.step) / budget
            rows.append({**features, "duration": max(left, 1.0 / budget), "event": float(event)})
    return rows


class SurvivalForecaster(ForecastRule):
    """The probability of acquisition within the budget and the acquisition step, from a Weibull AFT model of the
    time to acquisition fitted on calibration runs (module docstring).

    Unfitted it says nothing. Its forecast carries ``probability``; it warns once when the probability first
    reaches ``alert_probability`` (a capability is expected within the budget), and, like the other forecasters,
    when the forecast first comes within ``horizon`` steps if a horizon is given.

    Args:
        features: which of :data:`FEATURES` the model reads (the rule needs their series).
        landmarks: shares of the budget at which calibration runs give rows.
        penalizer: lifelines' L2 penalty on the coefficients.
        alert_probability: the probability at which it warns (None: never on probability).
        horizon: see :class:`~capgeo_callbacks.rules.ForecastRule` (default None).
        threshold: see :class:`~capgeo_callbacks.rules.ForecastRule`.

    Attributes:
        coef_: ``{feature: coefficient}`` of log lambda, with ``"Intercept"``; None before :meth:`fit`.
        rho_: the Weibull shape.
        rows_: how many rows and events it was fitted on.
    """

    name = "survival"
    fitted: ClassVar[Mapping[str, Any]] = {"coef": None, "rho": 1.0, "rows": {}}

    def __init__(self, features: Sequence[str] = tuple(FEATURES), landmarks: Sequence[float] = LANDMARKS,
                 penalizer: float = 0.01, alert_probability: float | None = 0.5, horizon: float | None = None,
                 threshold: float = 0.5) -> None:
        super().__init__(horizon, threshold)
        unknown = [name for name in features if name not in FEATURES]
        if unknown or not features:
            raise ValueError(f"features must be some of {', '.join(FEATURES)}, got {list(features)!r}")
        if not all(0 < landmark < 1 for landmark in landmarks) or not landmarks:
            raise ValueError(f"landmarks must be shares of the budget in (0, 1), got {list(landmarks)!r}")
        if alert_probability is not None and not 0 < alert_probability < 1:
            raise ValueError(f"alert_probability must be in (0, 1) or None, got {alert_probability!r}")
        if not penalizer >= 0:
            raise ValueError(f"penalizer must be >= 0, got {penalizer!r}")
        self.features, self.landmarks = tuple(features), tuple(landmarks)
        self.penalizer, self.alert_probability = float(penalizer), alert_probability
        self.needs = Needs(series=tuple(dict.fromkeys(FEATURES[name] for name in self.features)),
                           facts=("max_steps",))

    def fit(self, runs: CalibrationRuns) -> SurvivalForecaster:
        """Fit the AFT model on the landmark rows of ``runs`` (finished runs and their acquisition steps).

        Raises:
            ImportError: without lifelines (``pip install "capgeo-callbacks[stats]"``).
            ValueError: when the runs give no row, or no acquisition to learn from.
        """
        try:
            import pandas as pd
            from lifelines import WeibullAFTFitter
        except ImportError as err:
            raise ImportError("fitting SurvivalForecaster needs lifelines: pip install "
                              "'capgeo-callbacks[stats]'") from err
        rows = landmark_rows(runs, self.features, self.landmarks, self.threshold)
        events = int(sum(row["event"] for row in rows))
        if not rows or events == 0:
            raise ValueError(f"the calibration runs give {len(rows)} landmark rows with {events} acquisitions: "
                             "fitting needs runs that acquire within their budget and runs that do not")
        model = WeibullAFTFitter(penalizer=self.penalizer)
        model.fit(pd.DataFrame(rows), duration_col="duration", event_col="event")
        params = model.params_
        coef = {name: float(params[("lambda_", name)]) for name in (*self.features, "Intercept")}
        self.set_fitted(coef=coef, rho=math.exp(float(params[("rho_", "Intercept")])),
                        rows={"rows": len(rows), "events": events, "runs": len(runs)})
        return self

    def set_fitted(self, coef: Mapping[str, float] | None, rho: float,  # type: ignore[override]
                   rows: Mapping[str, int]) -> None:
        self.coef_ = None if coef is None else {name: float(value) for name, value in coef.items()}
        self.rho_ = float(rho)
        self.rows_ = dict(rows)

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "features": list(self.features), "landmarks": list(self.landmarks)}

    def scale(self, features: Mapping[str, float]) -> float:
        """lambda(x): the Weibull scale, in shares of the budget."""
        coef = self.coef_ or {}
        return math.exp(min(700.0, coef["Intercept"] + sum(coef[name] * features[name] for name in self.features)))

    def predict(self, run: RunView) -> tuple[float, float, float, float] | None:
        """``(probability, predicted, low, high)`` at the latest evaluation of ``run``: the probability of acquisition
        by the budget given none yet, and the acquisition step with its 10-90% interval; None when unfitted, without
        a budget, or with a feature not yet defined."""
        budget = run.max_steps
        if getattr(self, "coef_", None) is None or not budget or len(run.steps) < 2:
            return None
        features = survival_features(run, budget, self.features)
        if not all(math.isfinite(value) for value in features.values()):
            return None
        scale, rho = self.scale(features), self.rho_
        left = max(budget - run.step, 0) / budget
        probability = 1.0 - math.exp(-((left / scale) ** rho))

        def step_at(quantile: float) -> float:
            return run.step + budget * scale * (-math.log(1.0 - quantile)) ** (1.0 / rho)

        return probability, step_at(0.5), step_at(QUANTILES[0]), step_at(QUANTILES[1])

    def forecast(self, run: RunView) -> tuple[float, float, float] | None:
        found = self.predict(run)
        return None if found is None else found[1:]

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        output = super().update(run, raised)
        found = self.predict(run) if output.forecast is not None else None
        if found is None:
            return output
        probability = found[0]
        forecast = Forecast(**{**output.forecast.__dict__, "probability": probability})
        alerts = list(output.alerts)
        already = raised or alerts
        if not already and self.alert_probability is not None and probability >= self.alert_probability:
            alerts.append(self.alert(run, f"probability of acquisition within the budget {probability:.2f} "
                                          f"(>= {self.alert_probability:g}); forecast step {forecast.predicted:.0f}"))
        return RuleOutput(alerts=alerts, forecast=forecast)
