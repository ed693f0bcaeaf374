"""An alert's operating point is chosen on calibration runs within its false-alarm limits, or is none; forecasts
scored at shares of the budget count errors, coverage, width and false promises, beside "twice the current
step"."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from capgeo_callbacks.rules import RunView
from capgeo_callbacks.scoring import ScoredRun
from capgeo_callbacks.scoring.operating import (
    alert_step,
    budget_forecasts,
    choose_operating_point,
    fired_at,
    score_path,
    twice_now,
)
from capgeo_callbacks.scoring.scores import warning_scores

STEPS = list(range(0, 1001, 100))  # budget 1000


def run(name: str, acquisition: int | None, control: bool = False) -> ScoredRun:
    acc = [(step, 0.9 if acquisition is not None and step >= acquisition else 0.0) for step in STEPS]
    view = RunView.from_points(acc, {}, {"max_steps": 1000})
    return ScoredRun(name, view, acquisition, acquisition is not None, None, control, {"steps": 1000})


def path(values: Sequence[float]) -> list[tuple[int, float]]:
    return list(zip(STEPS, values, strict=False))


def test_an_alert_needs_its_consecutive_evaluations() -> None:
    values = path([0.1, 0.7, 0.2, 0.7, 0.8, 0.9])
    assert alert_step(values, 0.6, 1) == 100
    assert alert_step(values, 0.6, 2) == 400  # 0.7 at 300 and 0.8 at 400
    assert alert_step(values, 0.95, 1) is None
    assert alert_step(path([math.nan, 0.9, 0.9]), 0.5, 2) == 200  # an undefined value breaks a streak


def test_the_operating_point_keeps_false_alarms_and_controls_within_their_limits() -> None:
    learner, slow_learner = run("a", 600), run("b", 800)
    never = [run(f"n{k}", None) for k in range(5)]
    control = run("c", None, control=True)
    paths = [(learner, path([0.2, 0.6, 0.9, 0.9, 0.9, 0.9, 0.9])), (slow_learner, path([0.2, 0.4, 0.55, 0.55, 0.9]))]
    paths += [(never[0], path([0.2, 0.7, 0.2, 0.7]))]  # two lone high values, never two in a row
    paths += [(other, path([0.1] * 11)) for other in never[1:]]
    paths += [(control, path([0.3, 0.52, 0.3]))]
    point = choose_operating_point(paths)
    assert point is not None
    # both learners reach 0.55 before acquiring; the control's 0.52 stays below a point that catches them
    assert point.recall.k == 2 and point.controls.k == 0 and point.false_alarms.k <= 1
    assert alert_step(paths[0][1], point.threshold, point.consecutive) < learner.acquisition
    # a control above every acquirer's value: no point alerts on an acquirer without alerting it
    noisy = [(learner, path([0.2, 0.6])), (control, path([0.9, 0.9]))]
    assert choose_operating_point(noisy) is None


def test_fired_at_feeds_the_warning_table() -> None:
    learner, never = run("a", 600), run("n", None)
    paths = [(learner, path([0.2, 0.9, 0.9])), (never, path([0.2, 0.3]))]
    point = choose_operating_point(paths)
    scores = warning_scores("p", [learner, never], fired=fired_at(paths, point))
    assert scores["precision"].k == 1 and scores["false_alarms_never_acquired"].k == 0
    assert scores["lead"]["median"] == 500  # alerted at step 100, acquired at 600


def test_forecasts_at_shares_of_the_budget_count_errors_coverage_and_false_promises() -> None:
    learner, never = run("a", 600), run("n", None)

    def exact(scored: ScoredRun, view: RunView) -> tuple[float, float, float]:
        return 600.0, 500.0, 700.0

    found = budget_forecasts({"exact": exact, "twice": twice_now}, [learner, never], shares=(0.25, 0.5))
    quarter = found["0.25"]
    assert quarter["exact"]["median_error"] == 0 and quarter["exact"]["coverage"].k == 1
    assert quarter["exact"]["mean_width"] == pytest.approx(200 / 600)
    assert quarter["exact"]["false_promises"].k == 1  # it promised step 600 to the run that never acquires
    assert quarter["twice"]["median_error"] == pytest.approx(abs(400 - 600) / 600)  # at step 200
    assert found["0.5"]["twice"]["median_error"] == pytest.approx(abs(1000 - 600) / 600)


def test_score_path_scores_every_prefix() -> None:
    learner = run("a", 600)
    found = score_path(learner, lambda view: float(len(view.steps)))
    assert found[0] == (0, 1.0) and found[-1] == (1000, 11.0)


def test_the_reference_states_the_operating_point_defaults() -> None:
    """docs/reference.md says the policy's defaults as the code holds them: thresholds, evaluations in a row, caps."""
    from pathlib import Path

    from capgeo_callbacks.scoring.leads import MAX_CONTROL_RATE, MAX_FALSE_RATE
    from capgeo_callbacks.scoring.operating import CONSECUTIVE, THRESHOLDS

    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "reference.md").read_text().split())
    steps = [round(b - a, 2) for a, b in zip(THRESHOLDS, THRESHOLDS[1:], strict=False)]
    even = steps.index(next(step for step in steps if step != steps[0]))  # where the even steps end
    said = (f"{THRESHOLDS[0]:.2f}, {THRESHOLDS[1]:.2f}, ..., "
            + ", ".join(f"{value:.2f}" for value in THRESHOLDS[even:]) + " (`THRESHOLDS`)")
    assert said in text
    assert ", ".join(map(str, CONSECUTIVE[:-1])) + f" or {CONSECUTIVE[-1]} evaluations (`CONSECUTIVE`)" in text
    assert f"`max_false_rate={MAX_FALSE_RATE}`, `max_control_rate={MAX_CONTROL_RATE}`" in text
