"""study.phases.grokking: the registered grid as the example runs it, the labels, and the power law recovered from known
steps."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from examples.grokking.grokking import Settings
from study.phases.grokking import configs, late_steps, outcome, power_law, registration, run_name


def test_the_registered_runs_are_the_examples_settings_and_no_pilot_seed() -> None:
    found = registration()
    calibration, heldout = configs("calibration"), configs("heldout")
    assert len(calibration) == 2 * 2 * (6 + 1) and len(heldout) == 2 * 2 * (4 * 3 + 1)
    known = {field.name for field in fields(Settings)}
    for config in calibration + heldout:
        assert set(config) <= known
        Settings(**config)  # every registered run is a valid setting of the example
        assert config["seed"] not in found["seeds_never_reported"]
    assert not {c["seed"] for c in calibration} & {c["seed"] for c in heldout}
    assert len({run_name(c) for c in calibration + heldout}) == len(calibration + heldout)
    lo, hi = min(found["calibration"]["fractions"]), max(found["calibration"]["fractions"])
    assert all(lo < fraction < hi for fraction in found["heldout"]["fractions"])  # inside the calibration range
    with pytest.raises(ValueError, match="unknown phase"):
        configs("pilots")


def summary(grokked: int | None, train: list[tuple[int, float]], control: bool = False) -> dict:
    return {"acquisition_step": grokked, "max_steps": 5000, "control": control,
            "series": {"train/acc": [[step, value] for step, value in train]}}


def test_outcomes_follow_the_registered_labels() -> None:
    gap = late_steps()
    assert gap == 500
    memorised = [(100, 0.5), (600, 0.95)]
    assert outcome(summary(1200, memorised), gap) == "late"  # 0.9 at 600, grokked 600 steps later
    assert outcome(summary(1000, memorised), gap) == "prompt"  # 400 steps later
    assert outcome(summary(None, memorised), gap) == "never"
    assert outcome(summary(800, [(100, 0.5)]), gap) == "prompt"  # never memorised first
    assert outcome(summary(800, memorised, control=True), gap) == "control"


def test_power_law_recovers_known_parameters() -> None:
    r = np.array([0.3, 0.4, 0.5, 0.6, 0.7])
    steps = 200 * r ** -2.0 + 300
    a, g, b = power_law(r, steps)
    assert np.allclose([a, g, b], [200, 2.0, 300], rtol=1e-3)
    assert power_law(r[:3], steps[:3]) is None  # fewer than 4 fractions: no fit
