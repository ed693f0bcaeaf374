"""The forecasters from the monitored accuracy alone, on accuracy curves with a known acquisition step: binomial
noise around chance, then a logistic rise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from capgeo_callbacks.detection import detect_acquisition
from capgeo_callbacks.keys import ACC
from capgeo_callbacks.rules import LastValueForecaster, LinearForecaster, RunView, TrendForecaster, replay

STEPS = list(range(0, 1001, 10))
CHANCE, EXAMPLES = 0.1, 512


def curve(midpoint: float | None, width: float = 80.0, seed: int = 0) -> RunView:
    """Accuracy measured on 512 examples: chance, rising as a logistic in the step around ``midpoint`` (None: never)."""
    rng = np.random.default_rng(seed)
    truth = [CHANCE if midpoint is None else CHANCE + (1 - CHANCE) / (1 + math.exp(-(s - midpoint) / width))
             for s in STEPS]
    measured = rng.binomial(EXAMPLES, truth) / EXAMPLES
    return RunView(tuple(STEPS), {ACC: tuple(float(v) for v in measured)}, {})


def acquisition(run: RunView) -> int:
    found = detect_acquisition(run.steps, run.values(ACC), 0.5, 3)
    assert found is not None
    return found


@pytest.mark.parametrize("seed", range(5))
def test_no_forecast_on_the_plateau_and_one_that_holds_the_step_once_it_is_left(seed: int) -> None:
    run = curve(midpoint=600, seed=seed)
    actual = acquisition(run)
    _, forecasts = replay(TrendForecaster(), run)
    finite = [f for f in forecasts if math.isfinite(f.predicted)]
    assert finite, "a forecast once the accuracy has left chance"
    first = finite[0]
    assert 0.75 * actual >= first.step > 300  # not on the plateau (the rise is < 1 point of accuracy before 240)
    assert first.step < first.low <= first.predicted <= first.high
    assert first.low <= actual <= first.high
    assert abs(finite[-1].predicted - actual) / actual < 0.1  # closer as the rise goes on


@pytest.mark.parametrize("seed", range(5))
def test_a_run_at_chance_gets_no_forecast(seed: int) -> None:
    _, forecasts = replay(TrendForecaster(), curve(midpoint=None, seed=seed))
    assert forecasts == []


def test_a_rise_from_the_first_steps_has_no_plateau_to_leave() -> None:
    # learning that starts at step 0 (the output marginal) and stops at chance: no plateau before it, no forecast
    steps = tuple(range(0, 200, 5))
    acc = tuple(min(CHANCE, 0.004 * s) for s in steps[:20]) + (CHANCE,) * 20
    _, forecasts = replay(TrendForecaster(), RunView(steps, {ACC: acc}, {}))
    assert forecasts == []


def test_chance_given_or_recorded_replaces_the_estimate() -> None:
    run = curve(midpoint=600, seed=1)
    assert TrendForecaster(chance=0.1).chance_of(run, np.array([0.3])) == 0.1
    recorded = RunView(run.steps, run.series, {"chance": {"exact": 0.05, "token_acc": 0.2, "logprob": -2.0,
                                                           "logprob_sd": 0.5, "questions": 512, "tokens": 512}})
    assert TrendForecaster().chance_of(recorded, np.array([0.3])) == 0.05
    assert TrendForecaster().chance_of(run, np.array([0.1, 0.2, 0.3])) == 0.2
    with pytest.raises(ValueError, match="chance must be in"):
        TrendForecaster(chance=0.6)
    with pytest.raises(ValueError, match="spread"):
        TrendForecaster(spread=(0.5, 1.0))


def test_persistence_and_a_straight_line() -> None:
    run = curve(midpoint=600, seed=2)
    _, last = replay(LastValueForecaster(), run)
    reached = next(step for step, value in zip(run.steps, run.values(ACC), strict=True) if value >= 0.5)
    assert all(math.isinf(f.predicted) == (f.step < reached) for f in last)  # not within reach until at the level
    _, line = replay(LinearForecaster(), run)
    late = [f for f in line if f.step >= 560 and math.isfinite(f.predicted)]
    assert late and abs(late[-1].predicted - acquisition(run)) < 60
