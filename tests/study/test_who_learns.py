"""study.phases.who_learns: the registered runs are valid train.py runs on new seeds, every task gives both kinds of run
by two mechanisms, and the registration names rules train.py can load."""

from __future__ import annotations

import pytest

from study.phases.who_learns import jobs, registration
from sweep import train_args


def test_registered_runs_are_train_py_runs_on_seeds_apart() -> None:
    found = registration()
    calibration, heldout = jobs("calibration"), jobs("heldout")
    assert len(calibration) == 3 * 10 and len(heldout) == 3 * 18
    for job in calibration + heldout:
        args = train_args(job["argv"])  # train.py accepts it, registration rules included
        assert args.registered[1]["sha256"] and args.size == found["size"]
    assert not {j["seed"] for j in calibration} & {j["seed"] for j in heldout}
    assert len({j["name"] for j in calibration + heldout}) == len(calibration + heldout)
    for task, level in found["tasks"].items():
        settings = level["settings"]
        assert settings["short"]["max_steps"] < settings["full"]["max_steps"]  # a budget that falls short
        assert settings["slow"]["lr"] < settings["full"]["lr"]  # a learning rate too low
        assert settings["control"].get("shuffle_answers")
        assert {j["setting"] for j in heldout if j["task"] == task} == {"full", "short", "slow", "control"}
    with pytest.raises(ValueError, match="unknown phase"):
        jobs("pilots")
