"""Who will learn, on constructed runs whose answers are known: a score that separates the runs that acquire later
from those that never do scores AUROC 1, one that does not 0.5; too few runs is inconclusive, with n shown;
controls are no negatives; a rerun counts once."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from capgeo_callbacks.run.summary import write_summary
from capgeo_callbacks.run.tracker import RunTracker
from capgeo_callbacks.scoring import Auroc, auroc, discrimination, discrimination_table, distinct, load_runs, main
from capgeo_callbacks.scoring.discrimination import discriminations

STEPS = list(range(0, 1001, 50))  # 21 evaluations, budget 1000: 25% of it is step 250


def write(folder: Path, name: str, acc: Sequence[float], rank: float, task: str = "t", seed: int = 0,
          **info: object) -> None:
    """A run whose accuracy is ``acc``, whose loss falls as it rises, and whose ``rankme/x`` stays at ``rank``."""
    tracker = RunTracker(rules=[], run_info={"task": task, "difficulty": "hard", "seed": seed, "max_steps": 1000,
                                             "warmup_steps": 50, **info})
    for step, value in zip(STEPS, acc, strict=True):
        tracker.update(step, value, {"val/loss": 2.0 - value, "rankme/x": rank})
    write_summary(tracker.summary(), folder / name)


def learns(early: float) -> list[float]:
    """Below 0.5 until step 600, where it acquires; ``early`` at steps 50-550."""
    return [0.0] + [early] * 11 + [0.9] * 9


NEVER = [0.0] * 21


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Two runs that acquire (accuracy 0.2 early), two that never do (0.1 early), a control that rises higher
    still; RankMe the same everywhere."""
    for seed in (0, 1):
        write(tmp_path, f"learns-{seed}", learns(0.2), rank=5.0, seed=seed)
        write(tmp_path, f"never-{seed}", [0.0] + [0.1] * 20, rank=5.0, seed=seed)
    write(tmp_path, "control", [0.0] + [0.3] * 20, rank=5.0, shuffled_answers=True)
    return tmp_path


def row(found: dict, share: str, name: str) -> dict:
    return next(r for r in found[share]["rows"] if r["name"] == name)


def test_a_separating_score_scores_one_and_a_constant_one_half(folder: Path) -> None:
    found = discrimination(load_runs(folder), shares=(0.25,))
    entry = found["0.25"]
    # the control is no negative: with it, accuracy (0.3 there) would no longer separate the groups
    assert entry["groups"]["pooled"] == (2, 2)
    acc = row(found, "0.25", "acc")["cells"]["pooled"]
    assert (acc.value, acc.positives, acc.negatives) == (1.0, 2, 2)
    loss = row(found, "0.25", "val/loss")
    assert loss["direction"] == -1 and loss["cells"]["pooled"].value == 1.0  # lower loss: acquires
    for name in ("rankme/x", "fires on every run that learns"):
        cell = row(found, "0.25", name)["cells"]["pooled"]
        assert (cell.value, cell.low, cell.high) == (0.5, 0.5, 0.5)
    assert row(found, "0.25", "rankme/x")["direction"] is None  # no direction a priori


def test_runs_acquired_by_the_point_are_left_out(folder: Path) -> None:
    """At 75% of the budget (step 750) both learners have acquired (at 600): one group is empty."""
    entry = discrimination(load_runs(folder), shares=(0.75,))["0.75"]
    assert entry["groups"]["pooled"] == (0, 2)
    assert str(row({"0.75": entry}, "0.75", "acc")["cells"]["pooled"]) == "inconclusive (0 vs 2)"
    assert "No AUROC at this share" in discrimination_table({"0.75": entry})


def test_groups_of_one_are_inconclusive_with_n_shown() -> None:
    assert auroc([0.9], [0.1, 0.2]) == Auroc(1, 2)
    assert str(auroc([], [0.1])) == "inconclusive (0 vs 1)"
    separated = auroc([0.8, 0.9, float("inf")], [0.1, -float("inf")])
    assert separated.value == 1.0 and separated.low == 1.0 and str(separated).endswith("(3 vs 2)")
    mixed = auroc([0.1, 0.9, 0.5], [0.2, 0.8, 0.5])
    assert mixed.value == pytest.approx(0.5) and mixed.low < 0.5 < mixed.high


def test_within_each_task_beside_the_pooled_figure(tmp_path: Path) -> None:
    for task, early in (("a", 0.2), ("b", 0.4)):
        for seed in (0, 1):
            write(tmp_path, f"{task}-learns-{seed}", learns(early), rank=5.0, task=task, seed=seed)
            write(tmp_path, f"{task}-never-{seed}", [0.0] + [early - 0.05] * 20, rank=5.0, task=task, seed=seed)
    found = discrimination(load_runs(tmp_path), shares=(0.25,))
    cells = row(found, "0.25", "acc")["cells"]
    assert cells["a/hard"].value == 1.0 and cells["b/hard"].value == 1.0
    assert cells["pooled"].value == pytest.approx(0.75)  # b's runs that never acquire sit above a's that do
    assert "| score | direction | pooled (4 vs 4) | a/hard (2 vs 2) | b/hard (2 vs 2) |" in discrimination_table(found)


def test_directions_without_one_a_priori_come_from_calibration_runs(tmp_path: Path) -> None:
    for where in ("calibration", "scored"):
        for seed in (0, 1):
            write(tmp_path / where, f"learns-{seed}", learns(0.2), rank=3.0 + seed)
            write(tmp_path / where, f"never-{seed}", NEVER, rank=8.0 + seed)
    runs, calibration = load_runs(tmp_path / "scored"), load_runs(tmp_path / "calibration")
    raw = row(discrimination(runs, shares=(0.25,)), "0.25", "rankme/x")
    assert raw["direction"] is None and raw["cells"]["pooled"].value == 0.0  # the raw value, below 0.5
    calibrated = row(discrimination(runs, shares=(0.25,), calibration=calibration), "0.25", "rankme/x")
    assert calibrated["direction"] == -1 and calibrated["cells"]["pooled"].value == 1.0
    assert calibrated["source"].startswith("calibration")


def test_a_calibration_auroc_whose_interval_holds_one_half_fixes_no_direction(tmp_path: Path) -> None:
    """Calibration runs whose RankMe does not separate (3 and 8 in each group) leave the direction open: the raw
    AUROC is shown; the registered way (the point estimate's side of 0.5) still picks one."""
    for seed, rank in ((0, 3.0), (1, 8.0)):
        write(tmp_path / "calibration", f"learns-{seed}", learns(0.2), rank=rank)
        write(tmp_path / "calibration", f"never-{seed}", NEVER, rank=rank + 0.5)
    for seed in (0, 1):
        write(tmp_path / "scored", f"learns-{seed}", learns(0.2), rank=3.0 + seed)
        write(tmp_path / "scored", f"never-{seed}", NEVER, rank=8.0 + seed)
    runs, calibration = load_runs(tmp_path / "scored"), load_runs(tmp_path / "calibration")
    strict = row(discrimination(runs, shares=(0.25,), calibration=calibration), "0.25", "rankme/x")
    assert strict["direction"] is None and strict["cells"]["pooled"].value == 0.0
    assert strict["source"].startswith("no direction: calibration AUROC 0.25")
    point = row(discrimination(runs, shares=(0.25,), calibration=calibration, directions="point"), "0.25", "rankme/x")
    assert point["direction"] == -1 and point["cells"]["pooled"].value == 1.0
    with pytest.raises(ValueError, match="interval, point"):
        discrimination(runs, shares=(0.25,), directions="best")


def test_both_ways_of_fixing_directions_read_the_runs_once_and_give_what_each_gives_alone(tmp_path: Path) -> None:
    """``discriminations`` is ``discrimination`` under each way, from one reading: the same tables, and a score whose
    direction both ways agree on shares one cell (computed once), while the one they differ on does not."""
    for seed, rank in ((0, 3.0), (1, 8.0)):
        write(tmp_path / "calibration", f"learns-{seed}", learns(0.2), rank=rank)
        write(tmp_path / "calibration", f"never-{seed}", NEVER, rank=rank + 0.5)
    for seed in (0, 1):
        write(tmp_path / "scored", f"learns-{seed}", learns(0.2), rank=3.0 + seed)
        write(tmp_path / "scored", f"never-{seed}", NEVER, rank=8.0 + seed)
    runs, calibration = load_runs(tmp_path / "scored"), load_runs(tmp_path / "calibration")
    both = discriminations(runs, shares=(0.25,), calibration=calibration)
    assert set(both) == {"interval", "point"}
    for way, found in both.items():
        assert found == discrimination(runs, shares=(0.25,), calibration=calibration, directions=way)
    assert row(both["interval"], "0.25", "acc")["cells"] is row(both["point"], "0.25", "acc")["cells"]
    rankme = [row(found, "0.25", "rankme/x") for found in both.values()]
    assert rankme[0]["cells"]["pooled"].value == 0.0 and rankme[1]["cells"]["pooled"].value == 1.0


def test_a_rerun_counts_once(tmp_path: Path) -> None:
    write(tmp_path / "one", "run", learns(0.2), rank=5.0)
    write(tmp_path / "two", "run", learns(0.2), rank=5.0)  # the same settings, seed and series
    write(tmp_path / "two", "other-seed", learns(0.2), rank=5.0, seed=7)
    runs, reruns = distinct([*load_runs(tmp_path / "one"), *load_runs(tmp_path / "two")])
    assert len(runs) == 2 and [(Path(a.name).parent.parent.name, Path(b.name).parent.parent.name)
                               for a, b in reruns] == [("two", "one")]


def test_the_command_line_prints_the_table(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main([str(folder), "--rules", "warmup-end", "--shares", "0.25"])
    out = capsys.readouterr().out
    assert "At 25% of the budget, among the non-control runs not yet acquired: 2 acquire later, 2 never do" in out
    assert "| fires on every run that learns | - | 0.50 [0.50, 0.50] (2 vs 2) |" in out
    assert "| warning: warmup-end | alerted | 0.50 [0.50, 0.50] (2 vs 2) |" in out  # it alerted on every run
    with pytest.raises(SystemExit):
        main([str(folder), "--shares", "1.5"])


def test_without_scikit_learn_the_message_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sklearn", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"capgeo-callbacks\[stats\]"):
        auroc([0.9, 0.8], [0.1, 0.2])


def test_the_bootstrap_statistic_is_scipys_mann_whitney_u_over_the_pairs() -> None:
    """The counted U equals scipy's ranked U on tied, untied and batched resamples, bit for bit (the intervals of
    every page stay what they were), chunked or not."""
    import numpy as np
    from scipy.stats import mannwhitneyu

    module = importlib.import_module("capgeo_callbacks.scoring.discrimination")  # the package exports a function

    rng = np.random.default_rng(0)
    for trial in range(60):
        n1, n0 = (int(n) for n in rng.integers(2, 30, 2))
        values = rng.integers(0, 6, n1 + n0) / 2 if trial % 2 else rng.normal(size=n1 + n0)
        positives, negatives = values[:n1], values[n1:]
        batched = positives[rng.integers(0, n1, (4, 25, n1))], negatives[rng.integers(0, n0, (4, 25, n0))]
        for pos, neg in ((positives, negatives), batched):
            expected = mannwhitneyu(pos, neg, axis=-1, method="asymptotic").statistic / (n1 * n0)
            assert np.array_equal(module._u_share(pos, neg), expected)
    pos, neg = batched
    whole = module._u_share(pos, neg)
    module_chunk = module._PAIRS_PER_CHUNK
    try:
        module._PAIRS_PER_CHUNK = 1  # one resample at a time
        assert np.array_equal(module._u_share(pos, neg), whole)
    finally:
        module._PAIRS_PER_CHUNK = module_chunk
    assert module._u_share(np.array([[1.0, 2.0]]).T, np.array([[0.0, 2.0]]).T, axis=0).tolist() == [0.625]


def test_scores_in_the_same_order_give_the_same_auroc_and_interval() -> None:
    """Only the runs' order counts: a monotone change of the scores (the second asks for a cached figure) gives the
    same AUROC and interval, and a different order a different one."""
    positives, negatives = [0.9, 0.4, 0.8, 0.7, 0.35], [0.3, 0.5, 0.1, 0.2, 0.6, 0.45]
    first = auroc(positives, negatives)
    assert first == auroc([10 * x + 3 for x in positives], [10 * x + 3 for x in negatives])
    assert first.value == pytest.approx(24 / 30) and first.low < first.value < first.high
    swapped = auroc([0.9, 0.4, 0.8, 0.7, 0.55], negatives)  # one positive now above the negatives at 0.45 and 0.5
    assert swapped.value == pytest.approx(26 / 30) and swapped != first
