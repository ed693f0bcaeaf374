"""The capability stopper against Tune's ASHA and median stopping, replayed on the committed corpus (no training)
========================================================================================================

    python -m study.record.stopping --out docs/stopping.md

Each set of recorded runs (``study/stopping_settings.json``, "sets") is replayed evaluation by evaluation, with the
settings that file committed before any replay:

- the capability stopper's policy (:class:`~capgeo_callbacks.rules.stopping.StoppingPolicy`, the decision of the
  :class:`~capgeo_callbacks.callbacks.capability_stopper.CapabilityStopper`) decides on each run alone, from the
  run's series so far (:meth:`~capgeo_callbacks.rules.stopping.StoppingPolicy.replay` on the scorer's
  :class:`~capgeo_callbacks.scoring.ScoredRun` views);
- Tune's own :class:`~ray.tune.schedulers.ASHAScheduler` and :class:`~ray.tune.schedulers.MedianStoppingRule`
  (the scheduler objects, driven directly) decide on ``val/acc`` against the other runs of the set: every run's
  evaluations are fed in order of their share of the budget, as if the set had started together.

For each: on runs that never reach 0.5 (learnable runs, and separately shuffled-answer controls), how many were
stopped and the share of their step budgets saved; on runs that do reach 0.5, how many were stopped before their
acquisition step (learners lost). Rates with n and a Wilson 95% interval.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from capgeo_callbacks.detection.settings import DEFAULT_SETTINGS
from capgeo_callbacks.rules.stopping import StoppingPolicy
from capgeo_callbacks.scoring import Rate, ScoredRun, load_runs
from study.checkout import CORPUS, ROOT

SETTINGS = ROOT / "study" / "stopping_settings.json"
SETS = {"heldout": ("heldout",), "calibration-seeds": ("hard", "levels", "controls")}
METHODS = ("capability_stopper", "asha", "median_stopping")

INTRO = ("Each set of recorded runs is replayed evaluation by evaluation. The capability stopper decides on each run "
         "alone, from its series so far (`StoppingPolicy.replay`, the callback's own `should_stop`). Tune's "
         "`ASHAScheduler` and `MedianStoppingRule` (Tune's scheduler objects, driven directly) decide on `val/acc` "
         "against the other runs of the set: every run's evaluations are fed in order of their share of the budget, as"
         " if the whole set had started together and run at one speed. Per method: of the runs that never reach 0.5, "
         "how many were stopped and the share of their step budgets saved; of the runs that reach 0.5, how many were "
         "stopped before their acquisition step (learners lost). Rates: k/n with a Wilson 95% interval.")
Stops = dict[str, tuple[int | None, str]]  # run name -> (step it was stopped at, or None; why)


def capability_stopper(settings: Mapping[str, Any]) -> StoppingPolicy:
    """The stopping policy the settings file describes (its rules as rule records). The file, committed before any
    replay, also names the acquisition it was replayed with (``threshold``, ``acquisition_patience``): the run views'
    detection settings, which every rule and the policy read."""
    options = dict(settings["capability_stopper"]["settings"])
    acquisition = {"threshold": options.pop("threshold", DEFAULT_SETTINGS.threshold),
                   "acquisition_patience": options.pop("acquisition_patience", DEFAULT_SETTINGS.patience)}
    if acquisition != {"threshold": DEFAULT_SETTINGS.threshold, "acquisition_patience": DEFAULT_SETTINGS.patience}:
        raise ValueError(f"{SETTINGS} replays acquisition at {acquisition}; the recorded runs are read with the "
                         f"detection settings' threshold {DEFAULT_SETTINGS.threshold} and patience "
                         f"{DEFAULT_SETTINGS.patience}")
    return StoppingPolicy.from_settings(options)


def budget_percent(run: ScoredRun, step: int) -> float:
    return 100.0 * step / (run.view.max_steps or run.view.steps[-1])


def replay_stopper(runs: Sequence[ScoredRun], policy: StoppingPolicy) -> Stops:
    return {run.name: policy.replay(run.view) for run in runs}


def replay_scheduler(runs: Sequence[ScoredRun], make: Callable[[], Any], seed: int = 0) -> Stops:
    """Where a Tune scheduler stops each run, fed every run's ``val/acc`` in order of budget share."""
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import TrialScheduler

    np.random.seed(seed)  # ASHA draws each trial's bracket from numpy's global generator
    scheduler = make()
    trials = {run.name: Trial("replay", stub=True, trial_id=f"t{i}") for i, run in enumerate(runs)}
    for trial in trials.values():
        trial.set_status(Trial.RUNNING)

    class Replay:
        """The controller a scheduler asks for the live trials: every run of the set is running."""

        def get_live_trials(self) -> list[Any]:
            return [trial for trial in trials.values() if trial.status == Trial.RUNNING]

    controller = Replay()
    for trial in trials.values():
        scheduler.on_trial_add(controller, trial)
    events = sorted(((budget_percent(run, step), order, i, run) for order, run in enumerate(runs)
                     for i, step in enumerate(run.view.steps)), key=lambda event: event[:3])
    stops: Stops = {run.name: (None, "") for run in runs}
    for percent, _, i, run in events:
        trial = trials[run.name]
        if trial.status != Trial.RUNNING:
            continue
        result = {"budget_percent": percent, "val/acc": run.view.values("acc")[i], "training_iteration": i + 1}
        if i == len(run.view.steps) - 1:
            scheduler.on_trial_complete(controller, trial, result)
            trial.set_status(Trial.TERMINATED)
            continue
        if scheduler.on_trial_result(controller, trial, result) == TrialScheduler.STOP:
            stops[run.name] = (run.view.steps[i], f"stopped at {percent:.0f}% of the budget")
            trial.set_status(Trial.TERMINATED)
    return stops


def asha(settings: Mapping[str, Any]) -> Callable[[], Any]:
    from ray.tune.schedulers import ASHAScheduler

    return lambda: ASHAScheduler(**settings["asha"]["settings"])


def median_stopping(settings: Mapping[str, Any]) -> Callable[[], Any]:
    from ray.tune.schedulers import MedianStoppingRule

    return lambda: MedianStoppingRule(**settings["median_stopping"]["settings"])


def outcome(runs: Sequence[ScoredRun], stops: Stops) -> dict[str, Any]:
    """Stops and savings on the runs that never reach 0.5 (learnable; controls) and learners lost."""
    never = [run for run in runs if run.acquisition is None and not run.control]
    controls = [run for run in runs if run.control]
    learners = [run for run in runs if run.acquisition is not None and not run.control]

    def saved(group: Sequence[ScoredRun]) -> tuple[Rate, float | None]:
        budgets = [run.view.max_steps or run.view.steps[-1] for run in group]
        spared = [budget - stops[run.name][0] if stops[run.name][0] is not None else 0
                  for run, budget in zip(group, budgets, strict=True)]
        stopped = Rate(sum(stops[run.name][0] is not None for run in group), len(group))
        return stopped, (sum(spared) / sum(budgets) if budgets else None)

    lost = [run for run in learners if stops[run.name][0] is not None
            and stops[run.name][0] < run.acquisition]  # type: ignore[operator]
    return {"never": saved(never), "controls": saved(controls), "lost": Rate(len(lost), len(learners)),
            "lost_runs": [run.name for run in lost],
            "stopped_never": [run.name for run in never if stops[run.name][0] is not None],
            "reasons": {run.name: stops[run.name][1] for run in runs if stops[run.name][0] is not None}}


def replay_set(folders: Sequence[str], settings: Mapping[str, Any], corpus: Path) -> tuple[list[ScoredRun], dict]:
    runs = [run for folder in folders for run in load_runs(corpus / folder)]
    results = {"capability_stopper": replay_stopper(runs, capability_stopper(settings)),
               "asha": replay_scheduler(runs, asha(settings), seed=settings["asha"].get("seed", 0)),
               "median_stopping": replay_scheduler(runs, median_stopping(settings))}
    return runs, {method: outcome(runs, stops) for method, stops in results.items()}


def table(name: str, runs: Sequence[ScoredRun], outcomes: Mapping[str, Mapping[str, Any]]) -> str:
    lines = [f"### {name} ({len(runs)} runs)", "",
             "| method | never reach 0.5: stopped | their budget saved | controls: stopped | their budget saved | "
             "learners lost (stopped before acquisition) |", "| --- | --- | ---: | --- | ---: | --- |"]
    share = lambda value: "-" if value is None else f"{value:.0%}"  # noqa: E731
    for method, found in outcomes.items():
        (never, never_saved), (controls, controls_saved) = found["never"], found["controls"]
        lines.append(f"| {method.replace('_', ' ')} | {never} | {share(never_saved)} | {controls} | "
                     f"{share(controls_saved)} | {found['lost']} |")
    lines.append("")
    for method, found in outcomes.items():
        if found["lost_runs"]:
            lost = ", ".join(Path(name).name for name in found["lost_runs"])
            lines.append(f"- {method.replace('_', ' ')}, learners lost: {lost}")
        if method == "capability_stopper":
            for run_name, reason in found["reasons"].items():
                if run_name in found["stopped_never"]:
                    lines.append(f"- capability stopper stopped {Path(run_name).name}: {reason}")
    return "\n".join(lines)


COMMAND = "python -m study.record.stopping --out docs/stopping.md"


def page(corpus: Path = CORPUS) -> str:
    """docs/stopping.md: the three methods replayed on each set of committed runs."""
    settings = json.loads(SETTINGS.read_text())
    parts = []
    for name, folders in SETS.items():
        runs, outcomes = replay_set(folders, settings, corpus)
        parts.append(table(f"{name}: {', '.join(f'study/corpus/{f}' for f in folders)}", runs, outcomes))
    return (f"# Stopping runs early: the capability stopper, ASHA and median stopping\n\nGenerated by `{COMMAND}` "
            f"from the committed summaries, with the settings of `study/stopping_settings.json` (committed before the "
            f"first replay). {INTRO}\n\nControls: shuffled answers, or a level kept as a negative control that stayed "
            f"at chance (the scorer's definition). Which to use when: docs/sweeps.md.\n\n" + "\n\n".join(parts) + "\n")


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog="python -m study.record.stopping", description=__doc__.split("\n")[1])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--out", type=Path, default=None, help="write the tables into this Markdown file")
    args = parser.parse_args(argv)
    text = page(args.corpus)
    print(text)
    if args.out:
        args.out.write_text(text)
    return text


if __name__ == "__main__":
    main()
