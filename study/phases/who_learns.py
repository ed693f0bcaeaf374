"""The registered test of who will learn (issue 37; spec section 14): does capgeo tell, live, which runs will acquire
within their budget, and when?

    python -m study.phases.who_learns run calibration  # registered train.py runs (launcher) -> study/corpus/who-learns/
    python -m study.phases.who_learns fit              # fit on the calibration runs -> study/who_learns_fitted.json
    python -m study.phases.who_learns run heldout      # refuses to start before the fit is committed
    python -m study.phases.who_learns pilots           # the pilots' outcomes (docs/who-learns-pilots.md)
    python -m study.record.who_learns_report           # -> docs/who-learns.md (readme: the README's line)

Runs of capgeo's own tasks (``train.py``) at settings chosen on calibration-seed pilots so that every task gives
runs that acquire within their budget and runs that do not, by two mechanisms (a budget that falls short, a learning
rate too low), beside shuffled-answer controls. What is registered (``study/who_learns_registration.json``) was
committed before the first registered run; the runs record its sha256 (``train.py --registration``) and the commit
they ran; the report refuses a run whose registration differs or postdates it. Everything fitted (the probability of
acquisition, the clock, the baselines' mapping to probabilities) is fitted on the calibration runs only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from capgeo_callbacks.rules import ClockForecaster, RunView, SurvivalForecaster
from capgeo_callbacks.run.summary import read_summary
from capgeo_callbacks.sweeps import launch, summary_of
from study.checkout import ROOT, require_clean_tree
from study.phases import registered_phase_command
from study.phases.corpus import CORPUS, write_packed
from study.registrations.policy import committed, load_registered
from sweep import TrainTrial

REGISTRATION = ROOT / "study" / "who_learns_registration.json"
FITTED = ROOT / "study" / "who_learns_fitted.json"
RUNS = ROOT / "runs" / "who-learns"
FOLDER = CORPUS / "who-learns"
PILOT_RUNS = ROOT / "runs" / "p37"  # train.py --logdir runs/p37 --name NAME, at seed 0
PHASES = ("calibration", "heldout")


def registration(path: Path = REGISTRATION) -> dict[str, Any]:
    return json.loads(path.read_text())


def run_name(task: str, setting: str, seed: int) -> str:
    """``sort-full-s200``: the task, the registered setting and the seed."""
    return f"{task}-{setting}-s{seed}"


def jobs(phase: str, path: Path = REGISTRATION) -> list[dict[str, Any]]:
    """The registered runs of ``phase``: each task's settings at their seeds (``task``, ``setting``, ``seed``,
    ``argv``)."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; phases: {', '.join(PHASES)}")
    found = registration(path)
    runs = []
    for task, level in found["tasks"].items():
        for setting, seeds in found[phase].items():
            arguments = level["settings"][setting]
            for seed in seeds:
                argv = ["--task", task, "--difficulty", level["difficulty"], "--size", found["size"],
                        "--max-steps", str(arguments["max_steps"]), "--lr", str(arguments["lr"]), "--seed", str(seed),
                        "--registration", str(path),  # absolute: trials run from other folders
                        *(["--shuffle-answers"] if arguments.get("shuffle_answers") else [])]
                runs.append({"task": task, "setting": setting, "seed": seed, "argv": argv,
                             "name": run_name(task, setting, seed)})
    return runs


def view(summary: Mapping[str, Any]) -> RunView:
    series = {tag: points for tag, points in summary["series"].items() if tag != "acc"}
    info = {key: summary.get(key) for key in ("task", "difficulty", "max_steps", "warmup_steps")}
    return RunView.from_points(summary["series"]["acc"], series, info)


def fit(calibration: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the registration fits on the calibration runs: the probability (survival, controls included) and the
    clock (the median acquisition step of each task's calibration runs that acquired)."""
    runs = [(view(summary), summary.get("acquisition_step")) for summary in calibration]
    return {"survival": SurvivalForecaster().fit(runs).settings(), "clock": ClockForecaster().fit(runs).settings(),
            "calibration_runs": sorted(summary["name"] for summary in calibration)}


def run_phase(phase: str, engine: str = "ray", workers: int = 2, path: Path = REGISTRATION) -> list[Path]:
    """Run (or resume) every registered run of ``phase`` not yet exported, through the launcher, one thread each;
    export each finished one. The held-out phase starts only once the fit on the calibration runs is committed."""
    require_clean_tree(f"the registered who-learns runs ({phase})")
    if not committed(path):
        raise SystemExit(f"{path.relative_to(ROOT)} is not committed as it is: commit the registration first")
    if phase == "heldout" and not (FITTED.exists() and committed(FITTED)):
        raise SystemExit("the held-out runs start after the calibration fit: python -m study.phases.who_learns fit, "
                         f"commit {FITTED.relative_to(ROOT)}")
    todo = [job for job in jobs(phase, path) if not (FOLDER / phase / f"{job['name']}.json.gz").exists()]
    trials = [TrainTrial(job["name"], tuple(job["argv"]), logdir=RUNS / phase, tags={"phase": phase, **job},
                         cpus=registration(path)["threads"]) for job in todo]
    named = {trial.root: job for trial, job in zip(trials, todo, strict=True)}
    written: list[Path] = []

    def finished(outcome: Any) -> None:  # exported as each ends: a session that dies keeps what finished
        summary = summary_of(outcome.trial)
        if summary is not None:
            job = named[outcome.trial.root]
            summary.update(name=job["name"], phase=phase, setting=job["setting"])
            written.append(write_packed(summary, FOLDER / phase / f"{job['name']}.json.gz"))

    launch(trials, engine=engine, jobs=workers, on_outcome=finished)
    return written


def load(phase: str, path: Path = REGISTRATION, folder: Path = FOLDER) -> list[dict[str, Any]]:
    """The exported runs of ``phase`` made under this registration after it was committed (others refused)."""
    return load_registered(folder / phase, path)


def pilots_table(folder: Path = PILOT_RUNS) -> str:
    """The pilot runs' settings and outcomes (never reported as results: they chose the settings)."""
    lines = ["| run | budget | steps run | acquired at | last accuracy |", "| --- | ---: | ---: | ---: | ---: |"]
    for summary_path in sorted(folder.glob("*/version_0/capgeo_summary.json")):
        summary = read_summary(summary_path)
        last = summary["series"]["acc"][-1][1] if summary["series"].get("acc") else float("nan")
        lines.append(f"| {summary_path.parents[1].name} | {summary.get('max_steps')} | {summary.get('steps')} | "
                     f"{summary.get('acquisition_step') or '-'} | {last:.2f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    registered_phase_command("who_learns", __doc__, PHASES, FITTED, run_phase, lambda: fit(load("calibration")),
                             pilots_table, argv)


if __name__ == "__main__":
    main()
