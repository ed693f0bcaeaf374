"""Run labels on plain series: holds, acquisition, acquired fully, fall-back, late, chance."""

from __future__ import annotations

import math

import pytest

from capgeo_callbacks.detection import Chance, DetectionSettings, at_chance, detect_hold, label_run
from capgeo_callbacks.detection.labels import fell_back

STEPS = list(range(0, 200, 10))  # 20 evaluations


def acc_with(values: dict[int, float], default: float = 0.0) -> list[float]:
    return [values.get(step, default) for step in STEPS]


def test_detect_hold_needs_patience_consecutive_evaluations() -> None:
    acc = [0.0, 0.6, 0.6, 0.4, 0.6, 0.6, 0.6, 0.7]
    assert detect_hold(range(8), acc, 0.5, 3) == 4
    assert detect_hold(range(8), acc, 0.5, 2) == 1
    assert detect_hold(range(8), acc, 0.65, 1) == 7
    assert detect_hold(range(8), acc, 0.8, 1) is None
    assert detect_hold(range(3), [0.9, math.nan, 0.9], 0.5, 2) is None  # NaN counts as below


def test_a_clean_climb_is_acquired_fully_with_every_hold() -> None:
    climb = [0.0] * 8 + [0.3, 0.3, 0.55, 0.6, 0.7, 0.8, 0.92, 0.95, 0.95, 0.96, 0.97, 0.97]
    labels = label_run(STEPS, climb)
    assert labels.acquisition_step == 100 and labels.full_step == 140
    assert labels.holds == {"0.25": 80, "0.5": 100, "0.6": 110, "0.75": 130, "0.9": 140}
    assert labels.acquired_fully and labels.fallback_step is None and labels.outcome == "acquired-fully"
    assert labels.max_acc == 0.97


def test_a_wobble_is_not_a_fall_back_but_three_low_evaluations_are() -> None:
    # one evaluation at 0.40 after acquisition: the three-evaluation mean stays above 0.5 - 0.043
    wobble = [0.0] * 8 + [0.55, 0.6, 0.62, 0.40, 0.62, 0.7, 0.91, 0.92, 0.93, 0.95, 0.95, 0.95]
    assert label_run(STEPS, wobble).acquired_fully
    fall = [0.0] * 8 + [0.55, 0.6, 0.62, 0.44, 0.44, 0.44, 0.91, 0.92, 0.93, 0.95, 0.95, 0.95]
    labels = label_run(STEPS, fall)
    assert labels.fallback_step == 110 and not labels.acquired_fully and labels.outcome == "fell-back"
    # the floor is 0.5 minus the Wilson half-width at the validation size: 0.457 at 512, 0.469 at 2048
    assert fell_back(STEPS, fall, 80, 0.457, 3) == 110
    just_above = [0.0] * 8 + [0.55, 0.6, 0.62, 0.46, 0.46, 0.46, 0.91, 0.92, 0.93, 0.95, 0.95, 0.95]
    assert label_run(STEPS, just_above).acquired_fully
    assert not label_run(STEPS, just_above, DetectionSettings(validation_size=2048)).acquired_fully


def test_late_needs_four_warmups_and_a_quarter_of_the_budget() -> None:
    climb = [0.0] * 8 + [0.6] * 12  # acquired at step 80
    assert label_run(STEPS, climb, warmup_steps=20, max_steps=320).late is True
    assert label_run(STEPS, climb, warmup_steps=21, max_steps=320).late is False  # 80 < 4 x 21
    assert label_run(STEPS, climb, warmup_steps=20, max_steps=321).late is False  # 80 < 321 / 4
    assert label_run(STEPS, climb).late is None
    assert label_run(STEPS, [0.0] * 20, warmup_steps=1, max_steps=10).late is None


CHANCE = Chance(exact=0.01, token_acc=0.2, logprob=-2.0, logprob_sd=1.0, questions=512, tokens=4096)


def test_chance_is_the_upper_wilson_bound_of_the_input_independent_answer() -> None:
    # Wilson 95% upper bound of 5/512 is 0.0227 (scipy.stats.binomtest(5, 512).proportion_ci("wilson"))
    assert at_chance([0.0, 0.01, 0.022], CHANCE)
    assert not at_chance([0.0, 0.01, 0.024], CHANCE)
    assert not at_chance([0.0], CHANCE, token_acc=[0.23])  # above the marginal's per-token accuracy
    assert at_chance([0.0], CHANCE, token_acc=[0.21], logprob=[-2.0, -1.98])
    assert not at_chance([0.0], CHANCE, logprob=[-1.9])  # 1.96 x 1 / sqrt(4096) = 0.03 above the marginal


def test_outcomes_of_runs_never_acquired() -> None:
    assert label_run(STEPS, [0.0] * 20, chance=CHANCE).outcome == "chance"
    assert label_run(STEPS, acc_with({150: 0.3}), chance=CHANCE).outcome == "partial"
    assert label_run(STEPS, [0.0] * 20).outcome == "unknown"
    acquired = label_run(STEPS, [0.0] * 10 + [0.6] * 10, chance=CHANCE)
    assert acquired.outcome == "acquired" and acquired.at_chance is False


def test_chance_round_trips_through_a_dict() -> None:
    assert Chance.from_dict({**CHANCE.to_dict(), "extra": 1}) == CHANCE


@pytest.mark.parametrize("bad", [{"full_threshold": 0}, {"validation_size": 0}])
def test_label_settings_are_validated(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        DetectionSettings(**bad)
