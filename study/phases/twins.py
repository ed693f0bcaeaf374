"""Twins (issue 44; spec section 16): runs that share every setting and differ only in their seed, in cells where
about half the seeds acquire within the budget, so that no setting tells them apart. Does the geometry (RankMe per
layer, the probes, ILDR, the commutator defect) tell which twins will acquire, beyond the accuracy, the losses and
the weight norm?

    python -m study.phases.twins pilots run   # the pilot runs (seeds 3000 and up) -> study/corpus/twins/pilots/
    python -m study.phases.twins pilots       # each candidate cell's pilot outcomes (docs/twins-pilots.md)
    python -m study.phases.twins calibration run --workers 2   # the registered twins -> study/corpus/twins/calibration/
    python -m study.phases.twins fit                           # the calibration twins -> study/twins_fitted.json
    python -m study.phases.twins heldout run --workers 2       # refuses to start before the fit is committed

This module holds the first step: **pilots**, on their own seed range, listed and never reported as results, that
find the cells. Each candidate is a train.py setting with its budget (the learning-rate schedule is tied to the
budget, so each candidate budget has its own pilot seeds) or a grokking setting run long (its learning rate is
constant after a short warm-up, so a budget can be read off long runs: a run cut at a budget is that run's
prefix). A cell is a twin cell when 30-70% of its pilot seeds acquire within the budget. The registration (cells,
seeds per cell, models, endpoints, decision rules, targets, every run's settings) is committed after the pilots and
before any calibration twin; :mod:`study.phases.twins_registered` runs its phases.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from capgeo_callbacks.run.summary import read_summary
from capgeo_callbacks.sweeps import FunctionTrial, launch
from study.checkout import ROOT, require_clean_tree
from study.phases import functions, registered_phase_command
from study.phases import twins_registered as registered
from study.phases.corpus import trial_summary, write_packed
from study.phases.twins_cells import FOLDER, RUNS, cell_name
from sweep import TrainTrial

DOC = ROOT / "docs" / "twins-pilots.md"
PILOT_SEEDS = tuple(range(3000, 3008))  # 8 per candidate cell; never a calibration or held-out seed
TWIN_SHARE = (0.3, 0.7)  # a twin cell: this share of its pilot seeds acquire within the budget
GROKKING_FIXED = {"p": 97, "lr": 0.001, "warmup": 10, "batch_size": 512, "dim": 128, "layers": 1, "heads": 4,
                  "stop_at": 0.99}  # as in study/grokking_registration.json
LONG_BUDGET = 5000  # grokking pilots run this long; a cell's budget is read off them

# train.py candidates (size xs, learning rate 1e-3, train.py's defaults otherwise), each budget near where the
# committed corpus's same-setting runs acquire (study/corpus/who-learns, study/corpus/calibration: e.g. sort medium at
# 400 steps acquired on 2 of 5 seeds, reverse medium at 1500 steps between 240 and 636, mul medium at 1200 between 683
# and 997, compare hard at 2400 on 3 of 9)
CANDIDATES: tuple[Mapping[str, Any], ...] = (
    {"task": "sort", "difficulty": "medium", "max_steps": 450},
    {"task": "sort", "difficulty": "medium", "max_steps": 600},
    {"task": "reverse", "difficulty": "medium", "max_steps": 350},
    {"task": "reverse", "difficulty": "medium", "max_steps": 500},
    {"task": "mul", "difficulty": "medium", "max_steps": 700},
    {"task": "mul", "difficulty": "medium", "max_steps": 900},
    {"task": "compare", "difficulty": "hard", "max_steps": 2400},
)
# Added candidates (the second round): by their first 3 pilots each, none of mul medium (700, 900), reverse medium
# (350, 500) or compare hard (2400) is on its way to 30-70%, leaving fewer than 4 cells of capgeo's tasks. These are
# the settings whose committed same-setting runs split nearest half (study/corpus/who-learns, study/corpus/calibration,
# study/corpus/heldout; some seeds appear in two phases): mul medium at 1200 acquired on 9 of 14, reverse hard at 2400
# on 14 of 24, sort hard at 2400 on 12 of 23, compare hard at 3200 on 10 of 18, at the budgets those runs had (the
# learning-rate schedule is tied to the budget). Estimated at about 1.2 CPU-hours for their pilots, under the 1.5
# allowed; they took 1.64 (28 pilots: reverse hard was dearer than estimated), so no further round is run and the
# twins go on with the cells there are (3 of capgeo's tasks, from mul and sort; study/twins_registration.json).
ADDED_CANDIDATES: tuple[Mapping[str, Any], ...] = (
    {"task": "mul", "difficulty": "medium", "max_steps": 1200},
    {"task": "reverse", "difficulty": "hard", "max_steps": 2400},
    {"task": "sort", "difficulty": "hard", "max_steps": 2400},
    {"task": "compare", "difficulty": "hard", "max_steps": 3200},
)
TRAIN_CANDIDATES = (*CANDIDATES, *ADDED_CANDIDATES)  # every train.py candidate, in order
GROKKING_CANDIDATES: tuple[Mapping[str, Any], ...] = (
    {"operation": "add", "fraction": 0.45, "weight_decay": 1.0},
    {"operation": "sub", "fraction": 0.45, "weight_decay": 1.0},
)


def pilot_jobs() -> list[tuple[str, TrainTrial | FunctionTrial]]:
    """Every pilot run, seed by seed across the cells (a phase cut short still covers every cell)."""
    jobs: list[tuple[str, TrainTrial | FunctionTrial]] = []
    for seed in PILOT_SEEDS:
        for candidate in TRAIN_CANDIDATES:
            name = f"{cell_name(candidate)}-s{seed}"
            argv = ("--task", candidate["task"], "--difficulty", candidate["difficulty"], "--size", "xs",
                    "--max-steps", str(candidate["max_steps"]), "--lr", "0.001", "--seed", str(seed))
            jobs.append((name, TrainTrial(name, argv, logdir=RUNS / "pilots", tags={"cell": cell_name(candidate)})))
        for candidate in GROKKING_CANDIDATES:
            name = f"{cell_name(candidate)}-s{seed}"
            config = {**GROKKING_FIXED, **candidate, "max_steps": LONG_BUDGET, "seed": seed, "control": False}
            jobs.append((name, FunctionTrial(name, functions.grokking, config, logdir=RUNS / "pilots",
                                             tags={"cell": cell_name(candidate)})))
    return jobs


def decided(steps: Sequence[int | None], planned: int = len(PILOT_SEEDS)) -> bool:
    """Whether a train.py cell is already known not to be a twin cell, whatever its remaining pilots give: so many
    acquired (or so many not) that the share acquired over ``planned`` pilots cannot fall within 30-70%."""
    acquired = sum(step is not None for step in steps)
    missed = len(steps) - acquired
    low, high = TWIN_SHARE
    return acquired > high * planned or (planned - missed) < low * planned


def pilot_outcomes(folder: Path = FOLDER / "pilots") -> dict[str, list[int | None]]:
    """Each cell's exported pilots' acquisition steps (None: not within the budget)."""
    cells: dict[str, list[int | None]] = {}
    for path in sorted(folder.glob("*.json.gz")):
        summary = read_summary(path)
        cells.setdefault(str(summary.get("cell")), []).append(summary.get("acquisition_step"))
    return cells


def run_pilots(engine: str = "ray", workers: int = 2) -> list[Path]:
    """Run (or resume) every pilot not yet exported, one thread each; export each as it finishes.

    Seed by seed: before each seed's round, a train.py cell already decided (:func:`decided`) is dropped, so its
    remaining pilots are never run. Grokking cells run every pilot (a budget is read off all of them). Within a
    round the longest runs go first, so that the round's tail is short."""
    commit = require_clean_tree("the twins' pilots")
    written: list[Path] = []
    for seed in PILOT_SEEDS:
        outcomes = pilot_outcomes()
        todo = [(name, trial) for name, trial in pilot_jobs()
                if name.endswith(f"-s{seed}") and not (FOLDER / "pilots" / f"{name}.json.gz").exists()
                and (trial.kind == "function" or not decided(outcomes.get(trial.tags["cell"], [])))]
        todo.sort(key=lambda job: -_expected_steps(job[1]))
        if not todo:
            continue
        named = {trial.root: name for name, trial in todo}

        def finished(outcome: Any, named: Mapping[Path, str] = named) -> None:  # exported as each ends
            summary = trial_summary(outcome.trial, commit)
            if summary is not None:
                name = named[outcome.trial.root]
                summary.update(name=name, phase="pilots", cell=outcome.trial.tags["cell"])
                written.append(write_packed(summary, FOLDER / "pilots" / f"{name}.json.gz"))

        launch([trial for _, trial in todo], engine=engine, jobs=workers, on_outcome=finished)
    return written


def _expected_steps(trial: TrainTrial | FunctionTrial) -> int:
    return LONG_BUDGET if trial.kind == "function" else int(trial.args.max_steps)


def grokking_budget(steps: Sequence[int | None]) -> int | None:
    """A grokking cell's budget: the first step by which half its long pilots had grokked (the lower median
    grokking step, a pilot that never grokked counted as later than any); None when fewer than half grokked."""
    median = statistics.median_low(math.inf if step is None else step for step in steps) if steps else math.inf
    return None if math.isinf(median) else int(median)


def twin_share(steps: Sequence[int | None]) -> bool:
    """Whether a train.py cell's pilots put it in 30-70%: the share acquired within the budget, over all
    :data:`PILOT_SEEDS` (a cell is a twin cell only once every pilot has run)."""
    acquired = sum(step is not None for step in steps)
    return len(steps) == len(PILOT_SEEDS) and TWIN_SHARE[0] <= acquired / len(steps) <= TWIN_SHARE[1]


def twin_cells(folder: Path = FOLDER / "pilots") -> list[dict[str, Any]]:
    """The cells the pilots choose, as the registration lists them: each train.py candidate whose pilots are a
    twin share (:func:`twin_share`), with its own arguments, and each grokking candidate with its budget read off
    its long pilots (:func:`grokking_budget`), with its own configuration."""
    outcomes, cells = pilot_outcomes(folder), []
    for candidate in TRAIN_CANDIDATES:
        if twin_share(outcomes.get(cell_name(candidate), [])):
            cells.append({"cell": cell_name(candidate), "family": "tasks",
                          "argv": ["--task", candidate["task"], "--difficulty", candidate["difficulty"],
                                   "--max-steps", str(candidate["max_steps"])]})
    for candidate in GROKKING_CANDIDATES:
        steps = outcomes.get(cell_name(candidate), [])
        budget = grokking_budget(steps) if len(steps) == len(PILOT_SEEDS) else None
        if budget is not None:
            cells.append({"cell": cell_name(candidate), "family": "grokking",
                          "config": {**candidate, "max_steps": budget}})
    return cells


def pilots_table(folder: Path = FOLDER / "pilots") -> str:
    """Per candidate cell: its pilots' acquisition steps, the share acquired within the budget, and whether it is a
    twin cell; for grokking cells, the first step by which half its pilots had grokked (:func:`grokking_budget`)."""
    cells = pilot_outcomes(folder)
    lines = ["| cell | pilots | acquisition steps (-: not within the budget) | acquired | twin cell (30-70%) |",
             "| --- | ---: | --- | --- | --- |"]
    for cell, steps in cells.items():
        acquired = sum(step is not None for step in steps)
        shown = ", ".join("-" if step is None else str(step) for step in steps)
        waiting = f" so far ({len(steps)} of {len(PILOT_SEEDS)} pilots)" if len(steps) < len(PILOT_SEEDS) else ""
        if cell.startswith("grok-"):
            budget = grokking_budget(steps)
            verdict = "-" if budget is None else f"budget {budget} (half grokked by then){waiting}"
            lines.append(f"| {cell} | {len(steps)} | {shown} | {acquired} of {len(steps)} within {LONG_BUDGET} | "
                         f"{verdict} |")
            continue
        share = acquired / len(steps)
        if decided(steps) and not twin_share(steps):
            twin = "no" if len(steps) == len(PILOT_SEEDS) else "no (decided: its other pilots not run)"
        else:
            twin = "yes" if twin_share(steps) else f"open{waiting}"
        lines.append(f"| {cell} | {len(steps)} | {shown} | {acquired} of {len(steps)} ({share:.0%}) | {twin} |")
    return "\n".join(lines)


def page() -> str:
    return "\n".join(["# Twins: the pilots (never reported as results)", "",
                      "<!-- generated by: python -m study.phases.twins pilots -->",
                      "Pilot runs on their own seeds (3000-3007) that choose the twin cells; see "
                      "`study/phases/twins.py` for the candidates and why.", "", pilots_table(),
                      "<!-- end generated -->"])


def main(argv: Sequence[str] | None = None) -> None:
    registered_phase_command("twins", __doc__, registered.PHASES, registered.FITTED, registered.run_phase,
                             registered.fit_calibration, page, argv, run_pilots=run_pilots)


if __name__ == "__main__":
    main()
