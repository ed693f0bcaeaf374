"""What both registered pages say the same way (study.record.registered), on constructed runs whose answers are known:
the runs' settings alone, counts that add up, and paired intervals read as shown or not."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from capgeo_callbacks.run.summary import write_summary
from capgeo_callbacks.run.tracker import RunTracker
from capgeo_callbacks.scoring import ScoredRun, load_runs
from capgeo_callbacks.scoring.paired import Difference
from study.record import registered

STEPS = list(range(0, 1001, 50))  # budget 1000: 25% of it is step 250


def write(folder: Path, name: str, acc: Sequence[float], lr: float, **info: object) -> None:
    tracker = RunTracker(rules=[], run_info={"task": "t", "difficulty": "hard", "max_steps": 1000, "lr": lr, **info})
    for step, value in zip(STEPS, acc, strict=True):
        tracker.update(step, value, {"val/loss": 2.0 - value})
    write_summary(tracker.summary(), folder / name)


LEARNS = [0.0] * 12 + [0.9] * 9  # acquires at step 650 (0.5 held three evaluations from step 600)
EARLY = [0.0] * 2 + [0.9] * 19  # acquires before a quarter of the budget
NEVER = [0.0] * 21


def runs(folder: Path, seeds: Sequence[int]) -> list[ScoredRun]:
    """Runs whose learning rate alone says which learn: 1e-3 learns, 1e-4 never does; one learns early, one is a
    shuffled-answer control."""
    for seed in seeds:
        write(folder, f"learns-{seed}", LEARNS, 1e-3, seed=seed)
        write(folder, f"never-{seed}", NEVER, 1e-4, seed=seed)
    write(folder, "early", EARLY, 1e-3, seed=seeds[0])
    write(folder, "control", NEVER, 1e-3, seed=seeds[0], shuffled_answers=True)
    return load_runs(folder)


def settings(run: ScoredRun) -> dict[str, float]:
    return {"lr": float(run.summary["lr"])}


def test_a_model_of_settings_that_decide_the_outcome_separates_the_runs(tmp_path: Path) -> None:
    calibration, heldout = runs(tmp_path / "calibration", (0, 1, 2)), runs(tmp_path / "heldout", (100, 101))
    model = registered.settings_model(calibration, settings)
    assert all(model(run) > 0.5 for run in heldout if run.acquisition is not None)
    assert all(model(run) < 0.5 for run in heldout if run.acquisition is None and not run.control)
    [row] = registered.settings_rows(heldout, calibration, settings, lambda run, end: 0.5, (0.25,))
    assert row["auroc"].value == 1.0 and (row["auroc"].positives, row["auroc"].negatives) == (2, 2)
    # a constant probability against settings that separate: the settings' AUROC 1 against its 0.5
    assert row["difference"].value == -0.5 and row["difference"].n == 4
    assert registered.shown(row["difference"]).startswith("shown worse")


def test_the_counts_add_up_to_the_runs(tmp_path: Path) -> None:
    found = registered.left_out_words(runs(tmp_path, (0, 1)), 0.25)
    # 6 runs: 2 acquire later, 2 never do, 1 control, 1 acquired before a quarter of the budget
    assert found == "2 runs that acquire later vs 2 that never do; left out of the 6: 1 shuffled-answer control, " \
                    "1 already acquired by then"


def test_a_paired_interval_is_read_as_shown_only_when_it_leaves_zero_out() -> None:
    holds = Difference("auroc", 40, 0.88, 0.87, 0.009, -0.087, 0.096, 9999)
    above = Difference("auroc", 40, 0.9, 0.7, 0.2, 0.05, 0.3, 9999)
    assert registered.shown(holds) == "not shown better: +0.009 [-0.087, +0.096]"
    assert registered.shown(above).startswith("shown better")
    assert registered.shown(above, lower_is_better=True).startswith("shown worse")
    assert registered.paired_clause([("acc", above), ("val/loss", holds)]) == (
        "a paired interval shows it over acc (+0.200 [+0.050, +0.300]), not over val/loss (+0.009 [-0.087, +0.096])")
    assert registered.paired_clause([("val/loss", holds)]).startswith("no paired interval shows it over val/loss")
