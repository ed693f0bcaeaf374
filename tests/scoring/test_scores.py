"""The scorer on constructed runs whose answers are known: precision, recall, false alarms, leads, forecast
errors; every run it is given is scored."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from capgeo_callbacks.detection import Alert
from capgeo_callbacks.rules import Forecast, Rule, RuleOutput, RunView
from capgeo_callbacks.run.summary import write_summary
from capgeo_callbacks.run.tracker import RunTracker
from capgeo_callbacks.scoring import (
    Rate,
    forecast_scores,
    load_runs,
    main,
    warning_scores,
    warning_table,
)

STEPS = list(range(0, 1000, 50))  # 20 evaluations


def write_run(folder: Path, name: str, acc: Sequence[float], seed: int = 0, **info: object) -> None:
    tracker = RunTracker(rules=[], run_info={"task": "t", "difficulty": "hard", "seed": seed, "max_steps": 1000,
                                             "warmup_steps": 50, **info})
    for step, value in zip(STEPS, acc, strict=True):
        tracker.update(step, value, {"val/logprob": -2.0 + 2 * value})
    write_summary(tracker.summary(), folder / name)


ACQUIRED = [0.0] * 10 + [0.6, 0.7, 0.8, 0.9, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95]  # acquired at 500, fully
NEVER = [0.0] * 20


class AlarmAt(Rule):
    """Warns at a fixed step, whatever the run."""

    def __init__(self, step: int = 300) -> None:
        self.at, self.name = step, f"alarm-at-{step}"

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        if not raised and run.step >= self.at:
            return RuleOutput(alerts=[self.alert(run, f"step {self.at}")])
        return RuleOutput()


class Oracle(Rule):
    """Forecasts the true acquisition step (500) from step 0, with a +-10% interval."""

    name = "oracle"

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        return RuleOutput(forecast=Forecast(self.name, run.step, 500.0, 450.0, 550.0))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_run(tmp_path, "acquired", ACQUIRED)
    write_run(tmp_path, "never", NEVER)
    write_run(tmp_path, "control", NEVER, shuffled_answers=True)
    return tmp_path


def test_warning_scores_have_known_answers(folder: Path) -> None:
    runs = load_runs(folder)
    assert {run.name.split("/")[-2]: (run.acquisition, run.acquired_fully, run.control) for run in runs} == {
        "acquired": (500, True, False), "never": (None, False, False), "control": (None, False, True)}
    scores = warning_scores(AlarmAt(), runs)
    assert (scores["precision"], scores["recall"]) == (Rate(1, 3), Rate(1, 1))
    assert scores["false_alarms_controls"] == Rate(1, 1) and scores["false_alarms_never_acquired"] == Rate(1, 1)
    assert scores["lead"]["median"] == 200 and scores["lead_share"]["median"] == pytest.approx(0.4)
    assert str(Rate(1, 3)) == "1/3 = 0.33 [0.06, 0.79]"
    table = warning_table([scores, {**scores, "rule": "twin"}])
    assert "| 1 (tie) | alarm-at-300 |" in table and "| 1 (tie) | twin |" in table


def test_an_alert_at_or_after_acquisition_is_no_warning(folder: Path) -> None:
    """Acquired at 500: an alert at 500 or later warned of nothing, so it counts neither for nor against precision;
    on runs never acquired it is a false alarm whenever it comes."""

    scores = warning_scores(AlarmAt(600), load_runs(folder))
    assert (scores["precision"], scores["recall"]) == (Rate(0, 2), Rate(0, 1))
    assert scores["false_alarms_controls"] == Rate(1, 1) and scores["false_alarms_never_acquired"] == Rate(1, 1)


def test_forecast_scores_have_known_answers(folder: Path) -> None:
    scores = forecast_scores(Oracle(), load_runs(folder), keep_errors=True)
    half = scores["fractions"]["0.5"]
    assert half["n"] == 1 and half["median_error"] == 0.0 and half["coverage"] == Rate(1, 1)
    assert half["mean_width"] == pytest.approx(0.2)
    # the never-acquired run and the control, each apart: it never says "not within reach"
    assert (scores["never_acquired_beyond"], scores["controls_beyond"]) == (Rate(0, 1), Rate(0, 1))


def test_every_run_is_scored_whatever_its_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The scorer holds no study's policy: held-out seeds (a study's 100 and up) are scored like any other."""
    write_run(tmp_path, "calibration", ACQUIRED, seed=1)
    write_run(tmp_path, "held-out", ACQUIRED, seed=100)
    assert sorted(run.seed for run in load_runs(tmp_path)) == [1, 100]
    main([str(tmp_path), "--rules", "clock-20"])
    assert capsys.readouterr().out.startswith("2 runs: 2 acquired (2 fully)")


def test_the_command_line(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main([str(folder), "--rules", "warmup-end", "clock-20", "--forecasters", "token_acc-threshold"])
    out = capsys.readouterr().out
    assert out.startswith("3 runs: 1 acquired (1 fully), 1 controls, 1 never acquired")
    assert "| warmup-end |" in out and "| token_acc-threshold |" in out
    with pytest.raises(SystemExit):
        main([str(folder), "--rules", "nope"])
