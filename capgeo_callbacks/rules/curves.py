"""Domhan et al.'s (2015) learning-curve families, fitted to a run's exact-match accuracy with
``scipy.optimize.curve_fit``: where the fitted curves cross the acquisition level, with an interval from parameter
draws of each fit's covariance (:class:`~capgeo_callbacks.rules.forecasters.CurveForecaster`)."""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable

import numpy as np

from capgeo_callbacks.keys import ACC
from capgeo_callbacks.rules.base import RunView

__all__ = ["FAMILIES", "REACH", "fit_curve_families", "recent"]

REACH = 3.0  # forecasts beyond 3x the budget (or 10x the step so far) are "not within reach"


def recent(run: RunView, tag: str, window: float, start: int) -> tuple[np.ndarray, np.ndarray]:
    """The finite points of ``tag`` after ``start`` within the last ``window`` share of the steps so far."""
    steps = np.array(run.steps, dtype=float)
    values = np.array(run.values(tag), dtype=float)
    keep = np.isfinite(values) & (steps >= start) & (steps >= (1 - window) * steps[-1])
    return steps[keep], values[keep]


# Domhan et al. (2015), learning-curve families (saturating in t), each with an initial guess and bounds; fitted to
# exact-match accuracy, which rises from 0 towards its asymptote alpha <= 1.
def _mmf(t: np.ndarray, alpha: float, beta: float, kappa: float, delta: float) -> np.ndarray:
    return alpha - (alpha - beta) / (1 + np.power(kappa * t, delta))


def _weibull(t: np.ndarray, alpha: float, beta: float, kappa: float, delta: float) -> np.ndarray:
    return alpha - (alpha - beta) * np.exp(-np.power(kappa * t, delta))


def _janoschek(t: np.ndarray, alpha: float, beta: float, kappa: float, delta: float) -> np.ndarray:
    return alpha - (alpha - beta) * np.exp(-kappa * np.power(t / 1000.0, delta))


def _log_power(t: np.ndarray, alpha: float, beta: float, kappa: float) -> np.ndarray:
    return alpha / (1 + np.power(t / np.exp(beta), -kappa))


_SIGMOID_BOUNDS = ([0.0, 0.0, 1e-6, 0.1], [1.0, 1.0, 1.0, 20.0])
FAMILIES: dict[str, tuple[Callable[..., np.ndarray], Callable[[np.ndarray], list[float]], tuple]] = {
    "mmf": (_mmf, lambda t: [1.0, 0.0, 1.0 / float(t[-1]), 2.0], _SIGMOID_BOUNDS),
    "weibull": (_weibull, lambda t: [1.0, 0.0, 1.0 / float(t[-1]), 2.0], _SIGMOID_BOUNDS),
    "janoschek": (_janoschek, lambda t: [1.0, 0.0, 1.0, 2.0], ([0.0, 0.0, 1e-6, 0.1], [1.0, 1.0, 100.0, 20.0])),
    "log-power": (_log_power, lambda t: [1.0, float(np.log(t[-1])), 2.0], ([0.0, 0.0, 0.1], [1.0, 20.0, 20.0])),
}


@functools.lru_cache(maxsize=2048)  # offline scoring replays the same prefixes of a run on every page that reads it
def fit_curve_families(steps: tuple[int, ...], acc: tuple[float, ...], max_steps: int | None,
                       warmup_steps: int | None, families: tuple[str, ...], draws: int, seed: int,
                       threshold: float) -> tuple[float, float, float] | None:
    """Where the curve families fitted to ``acc`` cross ``threshold``: the median family's crossing, and the 10th and
    90th percentiles over parameter draws from each fit's covariance (None: too few points, or no fit)."""
    from scipy.optimize import curve_fit

    run = RunView(steps, {ACC: acc}, {"max_steps": max_steps, "warmup_steps": warmup_steps})
    x, y = recent(run, ACC, 1.0, max(1, warmup_steps or 0))
    if len(x) < 6:
        return None
    if y[-1] >= threshold:
        return float(run.step), float(run.step), float(run.step)
    horizon = np.linspace(run.step, REACH * (max_steps or 10 * run.step), 400)
    rng = np.random.default_rng(seed)
    crossings: list[float] = []
    centres: list[float] = []
    for name in families:
        function, guess, bounds = FAMILIES[name]
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                params, covariance = curve_fit(function, x, y, p0=guess(x), bounds=bounds, maxfev=2000)
                centres.append(_first_crossing(function(horizon, *params), horizon, threshold))
                if np.all(np.isfinite(covariance)):
                    sampled = rng.multivariate_normal(params, covariance, size=draws, check_valid="ignore")
                    sampled = np.clip(sampled, bounds[0], bounds[1])
                    crossings += [_first_crossing(function(horizon, *d), horizon, threshold) for d in sampled]
        except (RuntimeError, ValueError, TypeError, np.linalg.LinAlgError):
            continue
    if not centres:
        return None
    ordered = sorted(crossings or centres)  # inf sorts last: a quantile by position keeps it inf, never NaN
    at = lambda q: float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])  # noqa: E731
    return float(sorted(centres)[(len(centres) - 1) // 2]), at(0.1), at(0.9)


def _first_crossing(values: np.ndarray, steps: np.ndarray, target: float) -> float:
    above = np.nonzero(np.nan_to_num(values, nan=-np.inf) >= target)[0]
    return float(steps[above[0]]) if len(above) else math.inf
