r"""Where a user needs a warning and a forecast: an alert's operating point, and forecasts at shares of the budget
===============================================================================================================

Two questions the scorer's other tables leave open.

**When should a score alert?** A live score (the probability of acquisition, any series) alerts at the first
evaluation from which it has stayed at or above a ``threshold`` for ``consecutive`` evaluations. An alert that
rings on every run says nothing, so the pair is chosen on calibration runs only (:func:`choose_operating_point`),
by the one policy every rule's operating point follows (:func:`~capgeo_callbacks.scoring.leads.choose`): the
most calibration runs that acquire alerted before they acquire, while at most ``max_false_rate`` of the calibration
runs that never acquire and at most ``max_control_rate`` of the calibration controls alert (defaults: 20% and none;
ties: the fewer false alarms, then the higher threshold, then the fewer evaluations). When no pair alerts on any
acquirer within those limits there is no operating point and the alert should be off. On other runs,
:func:`fired_at` gives each run's alert step for :func:`~capgeo_callbacks.scoring.warning_scores`: precision,
recall, false alarms on runs that never acquire and on controls, each with n and a Wilson interval, and the lead
before acquisition. A rule with settings of its own (a loss's fall, a probe's level) is chosen the same way from a
grid of them: :mod:`capgeo_callbacks.scoring.leads`.

**How good is a forecast when a user reads it?** At fixed shares of each run's budget (10%, 25%, 50%), among the
non-control runs not yet acquired then (:func:`~capgeo_callbacks.scoring.discrimination.population`):
for those that acquire later, the median of ``|predicted - actual| / actual`` with a bootstrap interval (no
forecast: an infinite error), the share whose interval holds the actual step and the interval's mean width as a
share of it; for those that never acquire, the share whose forecast lies within the budget (a false promise).
Beside any forecaster, :func:`twice_now` ("the capability arrives at twice the current step") is the trivial
baseline: at half the time to acquisition it is exact by construction, which is why forecasts are scored at shares
of the budget rather than of the (unknown) time to acquisition.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from capgeo_callbacks.rules import RunView
from capgeo_callbacks.scoring.discrimination import SHARES, population
from capgeo_callbacks.scoring.leads import MAX_CONTROL_RATE, MAX_FALSE_RATE, alerting, choose
from capgeo_callbacks.scoring.scores import Rate, ScoredRun, bootstrap_median

__all__ = ["OperatingPoint", "ScorePath", "alert_step", "budget_forecasts", "choose_operating_point", "fired_at",
           "score_path", "twice_now"]

THRESHOLDS = tuple(round(0.05 * k, 2) for k in range(2, 20)) + (0.96, 0.97, 0.98, 0.99)
CONSECUTIVE = (1, 2, 3, 5, 8)

ScorePath = list[tuple[int, float]]  # (step, score) at each evaluation; NaN where the score is not defined
Predicted = tuple[float, float | None, float | None]  # the forecast step, and its interval (None: none)
Predictor = Callable[[ScoredRun, RunView], Predicted | None]  # (the run, its series so far) -> its forecast


def score_path(run: ScoredRun, score: Callable[[RunView], float | None]) -> ScorePath:
    """``score`` at every evaluation of ``run``, each time on the series up to it (NaN where it gives none)."""
    found = []
    for end in range(1, len(run.view.steps) + 1):
        view = run.view.prefix(end)
        value = score(view)
        found.append((view.step, math.nan if value is None else float(value)))
    return found


def alert_step(path: ScorePath, threshold: float, consecutive: int) -> int | None:
    """The step of the evaluation at which ``path`` has been at or above ``threshold`` for ``consecutive``
    evaluations in a row (None: never)."""
    run = 0
    for step, value in path:
        run = run + 1 if math.isfinite(value) and value >= threshold else 0
        if run >= consecutive:
            return step
    return None


@dataclass(frozen=True)
class OperatingPoint:
    """A threshold and a number of consecutive evaluations, with what they gave on the runs they were chosen on."""

    threshold: float
    consecutive: int
    recall: Rate
    false_alarms: Rate
    controls: Rate

    def __str__(self) -> str:
        return (f"at or above {self.threshold:g} for {self.consecutive} evaluation"
                f"{'s' if self.consecutive > 1 else ''} in a row")


def choose_operating_point(calibration: Sequence[tuple[ScoredRun, ScorePath]], max_false_rate: float = MAX_FALSE_RATE,
                           thresholds: Sequence[float] = THRESHOLDS, consecutive: Sequence[int] = CONSECUTIVE,
                           max_control_rate: float = MAX_CONTROL_RATE) -> OperatingPoint | None:
    """The operating point chosen on ``calibration`` runs and their score paths (module docstring); None when no
    pair alerts on any acquirer within the limits."""
    runs = [run for run, _ in calibration]
    pairs = [(threshold, count) for threshold in thresholds for count in consecutive]
    found = [alerting(runs, fired_at(calibration, threshold, count)) for threshold, count in pairs]
    index = choose(found, max_false_rate, max_control_rate, prefer=[(threshold, -count) for threshold, count in pairs])
    if index is None:
        return None
    return OperatingPoint(*pairs[index], found[index].warned, found[index].false_alarms, found[index].controls)


def fired_at(runs: Sequence[tuple[ScoredRun, ScorePath]], point: OperatingPoint | float, consecutive: int = 1
             ) -> dict[str, int | None]:
    """Each run's alert step at ``point`` (or at a threshold and ``consecutive`` evaluations; None: no alert), as
    :func:`~capgeo_callbacks.scoring.warning_scores` takes it (``fired=``) to give the precision, recall, false
    alarms and leads on other runs."""
    threshold, count = ((point.threshold, point.consecutive) if isinstance(point, OperatingPoint)
                        else (point, consecutive))
    return {run.name: alert_step(path, threshold, count) for run, path in runs}


# ------------------------------------------------------------------------------------------- forecasts


def twice_now(run: ScoredRun, view: RunView) -> Predicted | None:
    """The trivial forecast: the capability arrives at twice the current step (no interval)."""
    return (2.0 * view.step, None, None) if view.step > 0 else None


def budget_forecasts(predictors: dict[str, Predictor], runs: Sequence[ScoredRun], shares: Sequence[float] = SHARES
                     ) -> dict[str, dict[str, Any]]:
    """Per share of the budget, per forecaster: its error, interval coverage and width on the runs that acquire
    later, and its false promises on those that never do (module docstring)."""
    found: dict[str, dict[str, Any]] = {}
    for share in shares:
        kept, _ = population(runs, share)
        entry = {}
        for name, predict in predictors.items():
            errors, covered, widths, promises = [], [], [], []
            for run, end, positive in kept:
                made = predict(run, run.view.prefix(end))
                budget = float(run.view.max_steps or 0)
                if not positive:
                    promises.append(made is not None and math.isfinite(made[0]) and made[0] <= budget)
                    continue
                actual = float(run.acquisition)  # type: ignore[arg-type]
                if made is None or not math.isfinite(made[0]):
                    errors.append(math.inf)
                    continue
                errors.append(abs(made[0] - actual) / actual)
                low, high = made[1], made[2]
                if low is not None and high is not None:
                    covered.append(low <= actual <= high)
                    widths.append((high - low) / actual if math.isfinite(high - low) else math.inf)
            finite = [error for error in errors if math.isfinite(error)]
            entry[name] = {"n": len(errors), "median_error": float(np.median(errors)) if errors else None,
                           "interval": bootstrap_median(errors) if finite else None,
                           "coverage": Rate(sum(covered), len(covered)),
                           "mean_width": float(np.mean(widths)) if widths else None,
                           "false_promises": Rate(sum(promises), len(promises))}
        found[f"{share:g}"] = entry
    return found
