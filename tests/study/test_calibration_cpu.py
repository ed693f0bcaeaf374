"""The fall-back count on whole runs, on constructed accuracy series whose answers are worked out by hand."""

from __future__ import annotations

from pathlib import Path

from capgeo_callbacks.run.summary import write_summary
from capgeo_callbacks.run.tracker import RunTracker
from capgeo_callbacks.scoring import load_runs
from study.phases.calibration_cpu import fallback, window

STEPS = list(range(0, 4000, 100))  # 40 evaluations


def whole_run(folder: Path, name: str, acc: list[float]) -> None:
    tracker = RunTracker(rules=[], run_info={"task": "t", "difficulty": "hard", "seed": 0, "max_steps": 4000,
                                             "warmup_steps": 100})
    for step, value in zip(STEPS, acc, strict=True):
        tracker.update(step, value, {})
    write_summary(tracker.summary(), folder / name)


def test_a_fall_back_after_the_window_is_counted_and_widens_it(tmp_path: Path) -> None:
    # 0.5 held from 500, 0.9 held from 1000 (confirmed at 1200, index 12); steady: never falls
    steady = [0.0] * 5 + [0.6] * 5 + [0.95] * 30
    # the same, then 0.1 from 3000 (index 30) for 3 evaluations: the first 3 evaluations averaging below the floor
    # (0.5 - 0.043) start at 2900 (0.95, 0.1, 0.1), confirmed at index 31: 19 evaluations after 0.9's confirmation
    late = [0.0] * 5 + [0.6] * 5 + [0.95] * 20 + [0.1] * 3 + [0.95] * 7
    # falls back inside the window (from 1400, confirmed 4 evaluations after 0.9's confirmation)
    early = [0.0] * 5 + [0.6] * 5 + [0.95] * 5 + [0.1] * 3 + [0.95] * 22
    for name, acc in (("steady", steady), ("late", late), ("early", early)):
        whole_run(tmp_path, name, acc)
    runs = {Path(run.name).parent.name: run for run in load_runs(tmp_path)}
    found = {name: fallback(run) for name, run in runs.items()}
    assert (found["steady"].fully_when_stopped, found["steady"].late, found["steady"].kept_until) == (True, False, 2000)
    assert (found["late"].fully_when_stopped, found["late"].late) == (True, True)
    assert (found["late"].fallback_step, found["late"].evaluations_after) == (2900, 19)
    early = found["early"]
    assert (early.fully_when_stopped, early.late, early.evaluations_after) == (False, False, 4)
    assert window([runs["steady"], runs["early"]]) == 8 and window(list(runs.values())) == 19
