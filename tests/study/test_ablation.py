"""The warm-up ablation's measures, against answers worked out by hand."""

from __future__ import annotations

import pytest

from study.phases.ablation import summed_rate, troughs


def run(lr: list[tuple[int, float]], rankme: list[tuple[int, float]]) -> dict:
    return {"series": {"lr": lr, "rankme/blocks.0": rankme}}


def test_summed_rate_of_a_linear_warm_up_is_the_triangle() -> None:
    # warm-up over 100 steps to a peak of 1e-3, evaluations at uneven steps
    steps = [0, 3, 10, 25, 50, 80, 100, 150, 200]
    lr = [(s, 1e-3 * min(s, 100) / 100) for s in steps]
    summary = run(lr, [(s, 1.0) for s in steps])
    assert summed_rate(summary, 50) == pytest.approx(50 * 50 / 200)  # half of 50 x (50/100)
    assert summed_rate(summary, 100) == pytest.approx(50.0)
    assert summed_rate(summary, 150) == pytest.approx(100.0)  # the triangle, then 50 steps at the peak
    assert summed_rate(summary, 60) == pytest.approx(60 * 60 / 200)  # between two evaluations
    assert summed_rate(run([], []), 10) is None


def test_the_trough_and_its_drop_from_the_peak_before_it() -> None:
    rankme = [(0, 10.0), (10, 20.0), (20, 5.0), (30, 8.0), (700, 1.0)]  # the point past step 600 is ignored
    [(step, value, drop)] = troughs(run([], rankme)).values()
    assert (step, value) == (20, 5.0) and drop == pytest.approx(0.75)


def test_the_sentence_reads_troughs_rates_and_acquisition_from_the_runs() -> None:
    """Constructed runs: the trough at a quarter of each warm-up (at 5 steps without one), a rate that rises
    linearly over the warm-up; acquisition under the warm-ups given by hand, not rising steadily."""
    from study.phases.ablation import SCHEDULES, TASKS, follows_schedule

    def schedule_run(warmup: int) -> dict:
        steps = list(range(0, 601))
        lr = [(s, 1e-3 * (min(s, warmup) / warmup if warmup else 1.0)) for s in steps]
        trough = warmup // 4 or 5
        return run(lr, [(s, 5.0 if s == trough else 10.0) for s in steps])

    rows = {(task, name): [schedule_run(int(name[len("warmup"):]) if name.startswith("warmup") else 0)]
            for task in TASKS for name in SCHEDULES}
    acquired = {"warmup0": 400, "warmup50": 600, "warmup100": 1200, "warmup300": 1000, "constant": 450}
    rows |= {("full", name): [{"labels": {"acquisition_step": step}}] for name, step in acquired.items()}
    text = follows_schedule(rows)
    assert "sort 5 / 12 / 25 / 75;" in text and "under the 300-step warm-up at 25%, 25%, 25% of it" in text
    # summed rate to step t of a linear warm-up w: t^2 / 2w peak-rate steps (5 without a warm-up)
    assert "sort 5.0 / 1.4 / 3.1 / 9.4" in text and "less with a longer warm-up on 0 of 3 tasks" in text
    assert "troughs sort 5 and 5" in text
    assert "does not rise steadily with the warm-up: 400 / 600 / 1,200 / 1,000" in text and "(450 at" in text
