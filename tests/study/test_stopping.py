"""The stopper replay (study.record.stopping): Tune's real schedulers driven over recorded runs respect their committed
grace period, and the capability stopper's replay is its own decision, run by run."""

from __future__ import annotations

import json

import pytest

from capgeo_callbacks.scoring import load_runs
from study.record import stopping

pytest.importorskip("ray")


def test_schedulers_stop_only_after_the_grace_period_and_the_stopper_replays_its_own_decision() -> None:
    settings = json.loads(stopping.SETTINGS.read_text())
    runs = load_runs(stopping.CORPUS / "heldout")
    assert len(runs) == 36
    for make in (stopping.asha(settings), stopping.median_stopping(settings)):
        stops = stopping.replay_scheduler(runs, make)
        stopped = [(run, stops[run.name][0]) for run in runs if stops[run.name][0] is not None]
        assert stopped, "a scheduler that stops nothing on 18 controls is not being driven"
        for run, step in stopped:
            assert step in run.view.steps and stopping.budget_percent(run, step) >= 25
    policy = stopping.capability_stopper(settings)
    found = stopping.replay_stopper(runs[:4], policy)
    assert found == {run.name: policy.replay(run.view) for run in runs[:4]}
    outcome = stopping.outcome(runs, found | {run.name: (None, "") for run in runs[4:]})
    assert outcome["lost"].n == sum(run.acquisition is not None and not run.control for run in runs)
