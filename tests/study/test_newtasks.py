"""The registered test on new task families (study.phases.newtasks): what it registers, which runs it accepts, and that
its targets' verdicts follow the measured figures."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from examples.new_tasks.run import SETTINGS
from study.phases.heldout import sha256
from study.phases.newtasks import REGISTRATION, jobs, registered_runs, registration, scored, targets
from study.registrations.policy import as_registered
from tests.scoring.test_scores import ACQUIRED, NEVER, write_run
from tests.study.helpers import repo_with_registration


def test_the_registration_names_runs_the_example_makes_and_no_pilot_seed() -> None:
    found = registration()
    planned = jobs()
    assert len(planned) == 4 * len(found["families"]) >= 12
    assert sum(control for _, _, control in planned) == len(found["families"])
    assert not {seed for _, seed, _ in planned} & set(found["seeds_never_reported"])
    for family, settings in found["families"].items():
        assert asdict(SETTINGS[family]) == settings, family


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    """A git repository with the registration committed after a first commit: (registration, before, after)."""
    return repo_with_registration(tmp_path / "repo", "newtasks_registration.json", REGISTRATION.read_text())


def test_runs_without_the_registration_or_made_before_it_are_refused(tmp_path: Path, repo: tuple) -> None:
    path, before, after = repo
    digest, runs = sha256(path), tmp_path / "runs"
    write_run(runs, "good", ACQUIRED, seed=100, registration={"sha256": digest}, commit=after)
    assert [Path(run.name).parent.name for run in registered_runs(path, runs)] == ["good"]
    write_run(runs, "unregistered", ACQUIRED, seed=101, commit=after)
    write_run(runs, "other", ACQUIRED, seed=101, registration={"sha256": "0" * 64}, commit=after)
    write_run(runs, "early", ACQUIRED, seed=102, registration={"sha256": digest}, commit=before)
    with pytest.raises(SystemExit) as refused:
        registered_runs(path, runs)
    message = str(refused.value)
    assert "unregistered" in message and "other" in message and "early" in message and "good" not in message


def test_each_target_is_met_exactly_when_its_figure_clears_it(tmp_path: Path, repo: tuple) -> None:
    path, _, after = repo
    runs, made = tmp_path / "runs", {"registration": {"sha256": sha256(path)}, "commit": after}
    for seed in (100, 101, 102):
        write_run(runs, f"learns-{seed}", ACQUIRED, seed=seed, **made)
    write_run(runs, "control", NEVER, seed=100, shuffled_answers=True, **made)
    s = scored(path, runs)
    assert len(s["runs"]) == 4 and sum(run.control for run in s["runs"]) == 1
    rows = {target: verdict for target, _, verdict in targets(s)}
    floor = registration(path)["targets"]["warning_precision_at_least"]
    for name in map(as_registered, registration(path)["warnings"]["default"]):  # "study (now rankme-recovery)"
        precision = s["warnings"][name]["precision"]
        met = precision.value is not None and precision.value >= floor
        assert rows[f"{name}: precision at least {floor}"].startswith("met" if met else "missed")
        alarms = s["warnings"][name]["false_alarms_controls"]
        assert rows[f"{name}: no false alarm on controls"] == ("met" if alarms.k == 0 else
                                                               f"missed ({alarms.k} of {alarms.n})")
    ours = s["forecasts"]["acc-trend"]["fractions"]["0.5"]["median_error"]
    for name in registration(path)["forecast_comparators"]:
        theirs = s["forecasts"][name]["fractions"]["0.5"]["median_error"]
        verdict = rows[f"acc-trend's error at 50% below {name}'s"]
        assert verdict.startswith("met") == (ours is not None and theirs is not None and ours < theirs)


def test_summaries_without_a_warm_up_are_scored_again_with_the_registered_one(tmp_path: Path, repo: tuple) -> None:
    """A correction beside the registered figures: the registered runs keep what their summaries say."""
    path, _, after = repo
    runs, made = tmp_path / "runs", {"registration": {"sha256": sha256(path)}, "commit": after}
    write_run(runs, "without", ACQUIRED, seed=100, task="recall", warmup_steps=None, **made)
    write_run(runs, "with", ACQUIRED, seed=101, task="recall", **made)  # warm-up 50, as recorded
    s = scored(path, runs)
    warmups = lambda chosen: {Path(run.name).parent.name: run.view.warmup_steps for run in chosen}  # noqa: E731
    assert warmups(s["runs"]) == {"without": None, "with": 50}
    assert s["corrected"]["count"] == 1
    assert warmups(s["corrected"]["runs"]) == {"without": registration(path)["families"]["recall"]["warmup"],
                                               "with": 50}


def test_a_replay_repeats_what_was_said_live_unless_a_fact_was_added_after(tmp_path: Path) -> None:
    from capgeo_callbacks.rules import make_rule
    from capgeo_callbacks.run.summary import write_summary
    from capgeo_callbacks.run.tracker import RunTracker
    from capgeo_callbacks.scoring import load_runs
    from study.phases.newtasks import replay_differences

    tracker = RunTracker(rules=[make_rule("acc-trend")], run_info={"task": "t", "seed": 0})  # no budget given live
    rising = [0.0] * 20 + [0.015 * i for i in range(1, 21)]  # off its plateau, not acquired
    for step, value in zip(range(0, 2000, 50), rising, strict=True):
        tracker.update(step, value)
    write_summary(tracker.summary(), tmp_path / "live" / "run")
    differ, total = replay_differences(load_runs(tmp_path / "live"), "acc-trend")
    assert total > 0 and differ == 0
    # the same summary with a budget added after the run: forecasts beyond 3 budgets are now out of reach
    summary = {**tracker.summary(), "max_steps": 300}
    write_summary(summary, tmp_path / "added" / "run")
    differ, total_added = replay_differences(load_runs(tmp_path / "added"), "acc-trend")
    assert total_added == total and differ > 0
