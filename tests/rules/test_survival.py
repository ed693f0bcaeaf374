"""SurvivalForecaster: its features against hand computations, its landmark rows (censoring), its fit against
lifelines' own predictions, and that it separates runs that will acquire from runs that will not."""

from __future__ import annotations

import math

import numpy as np
import pytest

from capgeo_callbacks.rules import RunView, SurvivalForecaster, replay
from capgeo_callbacks.rules.survival import landmark_rows, survival_features

BUDGET = 1000
STEPS = list(range(0, BUDGET + 1, 20))


def synthetic_run(acquire_at: float, seed: int, budget: int = BUDGET) -> tuple[RunView, int | None]:
    """Accuracy a logistic rise centred on ``acquire_at`` (from chance 0.05); the loss falls and the weight norm
    shrinks at a pace that grows with how soon the run acquires (as the progress measures of a learning run do),
    with noise."""
    rng = np.random.default_rng(seed)
    t = np.array(STEPS, dtype=float)
    acc = 0.05 + 0.95 / (1 + np.exp(-(t - acquire_at) / 40)) + rng.normal(0, 0.01, len(t))
    pace = 1.0 / acquire_at
    loss = 3.0 * np.exp(-pace * t * 0.8) + 0.1 + rng.normal(0, 0.02, len(t))
    norm = 40.0 * np.exp(-pace * t * 0.3) + rng.normal(0, 0.05, len(t))
    series = {"val/loss": [[s, v] for s, v in zip(STEPS, loss, strict=True)],
              "weight_norm/global": [[s, v] for s, v in zip(STEPS, norm, strict=True)]}
    view = RunView.from_points([[s, float(a)] for s, a in zip(STEPS, acc, strict=True)], series,
                               {"max_steps": budget})
    acquired = next((s for i, s in enumerate(STEPS) if i + 3 <= len(acc) and all(a >= 0.5 for a in acc[i:i + 3])),
                    None)
    return view, acquired


def calibration(count: int = 40, seed: int = 0) -> list[tuple[RunView, int | None]]:
    rng = np.random.default_rng(seed)
    return [synthetic_run(float(rng.uniform(300, 2500)), seed * 1000 + i) for i in range(count)]


def test_features_by_hand() -> None:
    steps = [0, 100, 200, 300, 400, 500]
    acc = [0.1, 0.1, 0.2, 0.3, 0.4, 0.5]
    loss = [4.0, 3.0, 2.0, 2.0, 1.0, 1.0]
    norm = [10.0, 10.0, 9.0, 9.0, 8.0, 5.0]
    view = RunView.from_points([[s, a] for s, a in zip(steps, acc, strict=True)],
                               {"val/loss": [[s, v] for s, v in zip(steps, loss, strict=True)],
                                "weight_norm/global": [[s, v] for s, v in zip(steps, norm, strict=True)]},
                               {"max_steps": 1000})
    found = survival_features(view, 1000)
    assert found["elapsed"] == 0.5
    assert math.isclose(found["acc"], 0.4) and math.isclose(found["acc_gain"], 0.3)
    # the last tenth of the budget holds steps 400 and 500: slopes per budget share
    assert math.isclose(found["acc_slope"], 0.1 / 0.1)
    assert math.isclose(found["loss_drop"], math.log(4.0) - np.mean(np.log([2.0, 1.0, 1.0])))
    assert math.isclose(found["loss_slope"], 0.0, abs_tol=1e-12)
    assert math.isclose(found["norm_change"], math.log(5.0 / 10.0))
    assert math.isclose(found["norm_slope"], (math.log(5.0) - math.log(8.0)) / 0.1)
    # minus the log-prob stands in for a loss the run does not log
    no_loss = RunView.from_points([[s, a] for s, a in zip(steps, acc, strict=True)],
                                  {"val/logprob": [[s, -v] for s, v in zip(steps, loss, strict=True)]}, {})
    assert math.isclose(survival_features(no_loss, 1000, ["loss_drop"])["loss_drop"], found["loss_drop"])
    assert math.isnan(survival_features(no_loss, 1000, ["norm_change"])["norm_change"])


def test_landmark_rows_censor_runs_that_never_acquire() -> None:
    learner, acquired = synthetic_run(600, seed=1)
    never, none = synthetic_run(5000, seed=2)
    assert acquired is not None and 560 <= acquired <= 640 and none is None
    rows = landmark_rows([(learner, acquired), (never, none)], ["elapsed", "acc"])
    learned = [row for row in rows if row["event"] == 1.0]
    censored = [row for row in rows if row["event"] == 0.0]
    # the learner gives rows only at landmarks it has not acquired by; each row's time to go ends at acquisition
    assert learned and all(row["elapsed"] * BUDGET <= acquired for row in learned)
    assert all(math.isclose(row["elapsed"] + row["duration"], max(acquired, row["elapsed"] * BUDGET + 1) / BUDGET)
               for row in learned)
    assert len(censored) == 19  # every landmark: censored at the budget's end
    # from the last evaluation at or before each landmark (every 20 steps here) to the budget's end
    assert [row["elapsed"] * BUDGET for row in censored] == [20 * ((50 * k) // 20) for k in range(1, 20)]
    assert all(math.isclose(row["duration"], 1 - row["elapsed"]) for row in censored)


def test_fit_agrees_with_lifelines_and_round_trips() -> None:
    pd = pytest.importorskip("pandas")
    lifelines = pytest.importorskip("lifelines")
    runs = calibration()
    rule = SurvivalForecaster().fit(runs)
    rows = landmark_rows(runs, rule.features)
    reference = lifelines.WeibullAFTFitter(penalizer=rule.penalizer).fit(
        pd.DataFrame(rows), duration_col="duration", event_col="event")
    frame = pd.DataFrame(rows).drop(columns=["duration", "event"])
    medians = reference.predict_median(frame).to_numpy()
    ours = np.array([rule.scale(row) * math.log(2) ** (1 / rule.rho_) for row in rows])
    assert np.allclose(ours, medians, rtol=1e-6)
    survival_half = reference.predict_survival_function(frame, times=[0.5]).to_numpy()[0]
    ours_half = np.array([math.exp(-((0.5 / rule.scale(row)) ** rule.rho_)) for row in rows])
    assert np.allclose(ours_half, survival_half, rtol=1e-6)
    rebuilt = SurvivalForecaster.from_settings(rule.settings())
    view = runs[0][0]
    assert replay(rebuilt, view) == replay(rule, view)
    assert rule.rows_["events"] >= 1 and rule.rows_["rows"] == len(rows)


def test_it_separates_runs_that_will_acquire_from_runs_that_will_not() -> None:
    pytest.importorskip("lifelines")
    rule = SurvivalForecaster().fit(calibration(seed=0))
    held_out = calibration(count=40, seed=1)
    at_quarter = []
    for view, acquired in held_out:
        end = sum(1 for step in view.steps if step <= 0.25 * BUDGET)
        if acquired is not None and acquired <= 0.25 * BUDGET:
            continue
        found = rule.predict(view.prefix(end))
        assert found is not None
        at_quarter.append((found[0], acquired is not None))
    learners = [p for p, learns in at_quarter if learns]
    others = [p for p, learns in at_quarter if not learns]
    assert learners and others
    auc = np.mean([a > b for a in learners for b in others])
    assert auc > 0.9


def test_live_output_carries_the_probability_and_warns_once() -> None:
    pytest.importorskip("lifelines")
    rule = SurvivalForecaster().fit(calibration(seed=0))
    view, acquired = synthetic_run(500, seed=7)
    alerts, forecasts = replay(rule, view)
    assert forecasts and all(f.probability is not None and 0 <= f.probability <= 1 for f in forecasts)
    assert all(f.step < acquired + 60 for f in forecasts)  # none once acquisition is confirmed
    assert len(alerts) == 1 and "probability of acquisition" in alerts[0].evidence
    first = next(f for f in forecasts if f.probability >= 0.5)
    assert alerts[0].step == first.step


def test_unfitted_it_says_nothing_and_bad_settings_are_errors() -> None:
    view, _ = synthetic_run(500, seed=3)
    assert replay(SurvivalForecaster(), view) == ([], [])
    for bad, message in [({"features": ["acc", "lr"]}, "features must be some of"),
                         ({"landmarks": [0.0, 0.5]}, "landmarks"), ({"alert_probability": 1.5}, "alert_probability"),
                         ({"penalizer": -1}, "penalizer")]:
        with pytest.raises(ValueError, match=message):
            SurvivalForecaster(**bad)
    never = [synthetic_run(5000, seed=i) for i in range(3)]
    with pytest.raises(ValueError, match="0 acquisitions"):
        SurvivalForecaster().fit(never)
