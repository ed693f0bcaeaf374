"""A scripted run every rule can read: RankMe collapsing and recovering in two layers, ILDR and the commutator defect
rising, a probe crossing, the weight norm falling, the answer log-prob and per-token accuracy rising, accuracy acquired
at step 1,500 (confirmed at 1,700), and the run facts the rules use (budget, warm-up, chance)."""

from __future__ import annotations

import math

from capgeo_callbacks.detection import Alert, Chance
from capgeo_callbacks.rules import Forecast, Rule, RunView
from capgeo_callbacks.run.tracker import RunTracker
from tests.detection.conftest import LATE_RANKME, PRECURSOR_ACC, PRECURSOR_RANKME, STEPS, points

CHANCE = Chance(exact=0.01, token_acc=0.2, logprob=-2.0, logprob_sd=0.5, questions=512, tokens=2048)
INFO = {"task": "scripted", "difficulty": "easy", "max_steps": 1900, "warmup_steps": 100, "chance": CHANCE.to_dict()}
LOGPROB = [-3.0, -2.2, -2.0, -2.0, -1.99, -2.0, -1.8, -1.6, -1.2, -1.0, -0.9, -0.8, -0.6, -0.5, -0.4, -0.3, -0.2,
           -0.15, -0.1, -0.05]
TOKEN_ACC = [0.2, 0.2, 0.21, 0.22, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.78, 0.85, 0.9, 0.93,
             0.95, 0.97]
PROBE = [0.1] * 6 + [0.7] * 14
WEIGHT_NORM = [40.0 - 0.5 * i for i in range(10)] + [35.0 - 1.5 * i for i in range(10)]
ILDR = [1.0, 1.1, 0.9, 1.0, 1.2, 1.5, 1.9, 2.3, 2.7, 3.5, 5.0, 7.0, 9.0] + [10.0] * 7  # 2.5 x its baseline at 800
COMMUTATOR = [4.0, 3.0, 5.0, 4.2, 4.5, 5.0, 6.0, 7.0, 7.9, 8.0, 12.0, 15.0, 14.0] + [10.0] * 7  # 2 x 4.0 at 900
ACQUIRED, CONFIRMED = 1500, 1700


def scripted_run() -> tuple[dict[str, list[list[float]]], dict[str, list[list[float]]]]:
    """(measured, scalars) of the scripted run, as series of points."""
    measured = {"rankme/blocks.0": points(STEPS, PRECURSOR_RANKME), "rankme/blocks.1": points(STEPS, LATE_RANKME),
                "ildr/blocks.1": points(STEPS, ILDR), "probe_acc/blocks.1": points(STEPS, PROBE),
                "weight_norm/global": points(STEPS, WEIGHT_NORM), "commutator/defect": points(STEPS, COMMUTATOR)}
    return measured, {"val/logprob": points(STEPS, LOGPROB), "val/token_acc": points(STEPS, TOKEN_ACC),
                      "val/loss": points(STEPS, [-value for value in LOGPROB])}


def scripted_view(info: dict | None = None) -> RunView:
    measured, scalars = scripted_run()
    return RunView.from_points(points(STEPS, PRECURSOR_ACC), {**measured, **scalars}, INFO if info is None else info)


def live(rule: Rule, info: dict | None = None) -> tuple[list[Alert], list[Forecast]]:
    """What ``rule`` emits fed one evaluation at a time through a tracker."""
    measured, scalars = scripted_run()
    tracker = RunTracker([rule], run_info=INFO if info is None else info)
    for i, step in enumerate(STEPS):
        so_far = {tag: values[: i + 1] for tag, values in measured.items()}
        tracker.update(step, PRECURSOR_ACC[i], {tag: values[i][1] for tag, values in scalars.items()}, so_far)
    return tracker.alerts, tracker.forecasts.get(rule.name, [])


def calibration_runs() -> list[tuple[RunView, int | None]]:
    """Three finished runs of the scripted task (its acquisition moved by -200, 0 and +200 steps) and their
    acquisition steps: what the fitted forecasters learn from."""
    runs = []
    for shift in (-2, 0, 2):
        acc = PRECURSOR_ACC[shift:] + [1.0] * shift if shift > 0 else [0.0] * -shift + PRECURSOR_ACC[:shift or None]
        measured, scalars = scripted_run()
        view = RunView.from_points(points(STEPS, acc), {**measured, **scalars}, INFO)
        acquired = next((s for i, s in enumerate(STEPS) if all(a >= 0.5 for a in acc[i:i + 3]) and i + 3 <= len(acc)),
                        None)
        runs.append((view, acquired))
    assert [acquired for _, acquired in runs] == [ACQUIRED + 200, ACQUIRED, ACQUIRED - 200]
    return runs


def ordered(forecast: Forecast) -> bool:
    """A forecast of a later step, its interval ordered around it (issue 33: forecasts that mean something)."""
    low = forecast.low if forecast.low is not None else forecast.predicted
    high = forecast.high if forecast.high is not None else forecast.predicted
    return forecast.step < low <= forecast.predicted <= high and not math.isnan(forecast.predicted)
