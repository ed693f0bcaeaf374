"""The registered grokking benchmark (issue 38; spec section 15): modular arithmetic trained by a user's function.

    python -m study.phases.grokking pilots           # the pilot grid's outcomes (examples/grokking/PILOTS.md)
    python -m study.phases.grokking run calibration  # registered runs through the launcher -> study/corpus/grokking/
    python -m study.phases.grokking fit              # fit on the calibration runs -> study/grokking_fitted.json
    python -m study.phases.grokking run heldout      # refuses to start before the fit is committed
    python -m study.record.grokking_report           # -> docs/grokking.md (readme: the README's line)

What is registered (``study/grokking_registration.json``: the grid of training fraction x weight decay, seeds, budget,
labels, rules, comparators, metrics and targets) was committed before the first registered run. A run refuses an
uncommitted tree or registration and its export records the registration's sha256 and the commit it ran; the
report refuses a run whose registration differs or postdates it. Everything fitted (the probability of grokking,
the power law in the training fraction, the clock) is fitted on the calibration runs only, and frozen in
``study/grokking_fitted.json`` before the held-out runs start.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from capgeo_callbacks.keys import ACC
from capgeo_callbacks.rules import RunView, SurvivalForecaster
from capgeo_callbacks.run.summary import read_summary
from capgeo_callbacks.sweeps import FunctionTrial, launch
from study.checkout import ROOT, require_clean_tree
from study.phases import functions, registered_phase_command
from study.phases.corpus import CORPUS, function_summary, write_packed
from study.phases.functions import registered_function
from study.registrations.policy import committed, load_registered, sha256

REGISTRATION = ROOT / "study" / "grokking_registration.json"
FITTED = ROOT / "study" / "grokking_fitted.json"
RUNS = ROOT / "runs" / "grokking"
FOLDER = CORPUS / "grokking"
PILOT_RUNS = ROOT / "runs" / "grokking-pilots"
PHASES = ("calibration", "heldout")
TRAIN_LEVEL = 0.9  # training accuracy that marks memorisation


def registration(path: Path = REGISTRATION) -> dict[str, Any]:
    return json.loads(path.read_text())


def run_name(config: Mapping[str, Any]) -> str:
    """``add-f0.35-wd1-s100`` (``-control`` for a control), as examples.grokking names its runs."""
    return (f"{config['operation']}-f{config['fraction']:g}-wd{config['weight_decay']:g}-s{config['seed']}"
            f"{'-control' if config.get('control') else ''}")


def configs(phase: str, path: Path = REGISTRATION) -> list[dict[str, Any]]:
    """The registered runs of ``phase``: every operation x weight decay x fraction x seed, then the controls."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; phases: {', '.join(PHASES)}")
    found = registration(path)
    part = found[phase]
    runs = []
    for operation in found["operations"]:
        for decay in found["weight_decays"]:
            points = [(fraction, seed, False) for fraction in part["fractions"] for seed in part["seeds"]]
            points += [(part["controls"]["fraction"], seed, True) for seed in part["controls"]["seeds"]]
            for fraction, seed, control in points:
                runs.append({**found["fixed"], "operation": operation, "weight_decay": decay, "fraction": fraction,
                             "seed": seed, "control": control})
    return runs


# ------------------------------------------------------------------------------------------------ labels


def train_step(summary: Mapping[str, Any], level: float = TRAIN_LEVEL) -> int | None:
    """The first evaluation step at which the recorded training accuracy reached ``level``."""
    return next((int(step) for step, value in summary["series"].get("train/acc", [])
                 if value is not None and value >= level), None)


def outcome(summary: Mapping[str, Any], late_steps: int) -> str:
    """``control``, ``never`` (not grokked within the budget), ``late`` or ``prompt`` (registration's labels)."""
    if summary.get("control"):
        return "control"
    grokked = summary.get("acquisition_step")
    if grokked is None or grokked > summary["max_steps"]:
        return "never"
    memorised = train_step(summary)
    return "late" if memorised is not None and memorised <= grokked - late_steps else "prompt"


def late_steps(path: Path = REGISTRATION) -> int:
    """The registered gap between memorisation and grokking that makes a run late."""
    return int(registration(path)["labels"]["late_steps"])


# ------------------------------------------------------------------------------------------------ comparators


def power_law(fractions: Sequence[float], steps: Sequence[float]) -> tuple[float, float, float] | None:
    """``(a, g, b)`` of t(r) = a r^-g + b fitted to the grokking steps at the training fractions (Notsawo et al.
    2023) by scipy's ``curve_fit`` (a, g > 0, b >= 0); None with fewer than 4 points or no fit."""
    if len(fractions) < 4:
        return None
    from scipy.optimize import curve_fit

    r, t = np.asarray(fractions, dtype=float), np.asarray(steps, dtype=float)
    try:
        (a, g, b), _ = curve_fit(lambda x, a, g, b: a * x ** -g + b, r, t, p0=(float(t.min()) / 2, 1.0, 0.0),
                                 bounds=([0.0, 0.0, 0.0], [np.inf, 20.0, np.inf]), maxfev=20000)
    except (RuntimeError, ValueError):
        return None
    return float(a), float(g), float(b)


def cell(summary: Mapping[str, Any]) -> str:
    """The operation and weight decay a comparator is fitted per: ``add/wd1``."""
    settings = summary["settings"]
    return f"{settings['operation']}/wd{settings['weight_decay']:g}"


def run_view(summary: Mapping[str, Any]) -> RunView:
    series = {tag: points for tag, points in summary["series"].items() if tag != ACC}
    return RunView.from_points(summary["series"][ACC], series, {"max_steps": summary["max_steps"]})


def fit(calibration: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the registration fits on the calibration runs: the probability of grokking (survival, controls
    included), the power law and the clock per operation and weight decay (runs that grokked)."""
    runs = [(run_view(summary), summary.get("acquisition_step")) for summary in calibration]
    survival = SurvivalForecaster().fit(runs)
    grokked: dict[str, list[tuple[float, int]]] = {}
    for summary in calibration:
        if not summary.get("control") and summary.get("acquisition_step") is not None:
            grokked.setdefault(cell(summary), []).append((summary["settings"]["fraction"], summary["acquisition_step"]))
    laws = {key: power_law([f for f, _ in points], [s for _, s in points]) for key, points in sorted(grokked.items())}
    clock = {key: statistics.median(s for _, s in points) for key, points in sorted(grokked.items())}
    return {"survival": survival.settings(), "power_law": laws, "clock": clock,
            "calibration_runs": sorted(summary["name"] for summary in calibration),
            "grokked": {key: sorted(points) for key, points in grokked.items()}}


# ------------------------------------------------------------------------------------------------ runs


def export(trial_dir: Path, config: Mapping[str, Any], phase: str, commit: str, digest: str) -> Path:
    """The run's summary with what the report needs (settings, phase, cost, provenance, registration) into
    ``study/corpus/grokking/<phase>/<name>.json.gz``."""
    summary = function_summary(trial_dir, commit)
    summary.update(name=run_name(config), phase=phase, control=bool(config["control"]),
                   registration={"path": str(REGISTRATION.relative_to(ROOT)), "sha256": digest})
    target = FOLDER / phase / f"{run_name(config)}.json.gz"
    write_packed(summary, target)
    return target


def run_phase(phase: str, engine: str = "ray", workers: int = 2, path: Path = REGISTRATION) -> list[Path]:
    """Run (or resume) every registered run of ``phase`` not yet exported, through the launcher, one thread each;
    export each finished one. The held-out phase starts only once the fit on the calibration runs is committed."""
    commit = require_clean_tree(f"the registered grokking runs ({phase})")
    if not committed(path):
        raise SystemExit(f"{path.relative_to(ROOT)} is not committed as it is: commit the registration first")
    if phase == "heldout" and not (FITTED.exists() and committed(FITTED)):
        raise SystemExit("the held-out runs start after the calibration fit: python -m study.phases.grokking fit, "
                         f"commit {FITTED.relative_to(ROOT)}")
    found, digest = registration(path), sha256(path)
    todo = [config for config in configs(phase, path) if not (FOLDER / phase / f"{run_name(config)}.json.gz").exists()]
    function = registered_function(functions.grokking, found["function"])
    trials = [FunctionTrial(run_name(config), function, config, logdir=RUNS / phase, tags={"phase": phase},
                            cpus=found["threads"]) for config in todo]
    config_of = {trial.root: config for trial, config in zip(trials, todo, strict=True)}
    written: list[Path] = []

    def finished(outcome: Any) -> None:  # exported as each ends: a session that dies keeps what finished
        if outcome.trial.state()[0] == "finished":
            written.append(export(outcome.trial.root, config_of[outcome.trial.root], phase, commit, digest))

    launch(trials, engine=engine, jobs=workers, on_outcome=finished)
    return written


def load(phase: str, path: Path = REGISTRATION, folder: Path = FOLDER) -> list[dict[str, Any]]:
    """The exported runs of ``phase`` made under this registration after it was committed (others refused)."""
    return load_registered(folder / phase, path)


# ------------------------------------------------------------------------------------------------ pilots


def pilots_table(folder: Path = PILOT_RUNS, late: int = 500) -> str:
    """The pilot runs' settings and outcomes (never reported as results: they chose the grid)."""
    lines = ["| run | grokked at | training accuracy 0.9 at | outcome | best validation accuracy |",
             "| --- | --- | --- | --- | --- |"]
    for summary_path in sorted(folder.glob("*/capgeo_summary.json")):
        summary = read_summary(summary_path)
        settings = json.loads((summary_path.parent / "run.json").read_text())["settings"]
        summary.update(control=settings["control"], max_steps=settings["max_steps"])
        best = max(value for _, value in summary["series"][ACC])
        lines.append(f"| {summary_path.parent.name} | {summary.get('acquisition_step') or '-'} | "
                     f"{train_step(summary) or '-'} | {outcome(summary, late)} | {best:.2f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    registered_phase_command("grokking", __doc__, PHASES, FITTED, run_phase, lambda: fit(load("calibration")),
                             pilots_table, argv)


if __name__ == "__main__":
    main()
