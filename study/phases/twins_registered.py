"""The twins' registered phases (issue 44; spec section 16): the calibration twins, the fit frozen on them, the
held-out twins, each run as the committed registration ``study/twins_registration.json`` fixes it.

    python -m study.phases.twins calibration run --workers 2   # -> study/corpus/twins/calibration/<twin>.json.gz
    python -m study.phases.twins fit                           # every calibration twin -> study/twins_fitted.json
    python -m study.phases.twins heldout run --workers 2  # -> study/corpus/twins/heldout/, once the fit is committed

**What the runner reads** of the registration (:data:`READS`), and nothing else of it; the rest is the analysis', in
words there and in :mod:`study.phases.twins_analysis` at the registration's commit:

- ``cells``: each ``{"cell", "family", ...}``; a ``tasks`` cell's ``argv`` (its own train.py arguments: task,
  difficulty and its budget ``--max-steps``), a ``grokking`` cell's ``config`` (operation, fraction, weight decay
  and its budget ``max_steps``). Its name is the pilots' for those settings
  (:func:`~study.phases.twins_cells.cell_name`) and says its family, as the analysis reads it.
- ``train.py``: ``argv``, the arguments every train.py twin shares; ``grokking``: ``function`` and ``fixed``, the
  training function and the configuration every grokking twin shares (its module offers ``Settings`` and
  ``capgeo_callbacks``, as the grokking example does).
- ``seeds``: per phase, ``seeds`` (one twin a cell each) and ``control_seeds`` (one shuffled-answer control a cell
  each: train.py ``--shuffle-answers``, the grokking function's ``control``).
- ``overhead_budget``: train.py's ``--overhead-budget``; every twin's summary must record it (the grokking example
  measures: ``"measure"``). ``threads``: each run's.

A twin is ``<cell>-s<seed>``, a control ``<cell>-s<seed>-control``. Before any run the runner refuses: a registration
not committed as it is, still marked a draft or template, or with a cell not filled in; a cell whose name is not its
settings' or its family's; a twin that would record fewer than :data:`MIN_DEFECT_VALUES` commutator defect values
before a quarter of its budget (its measure's cadence on its evaluation schedule; 256 geometric evaluations give 9 or
more at every budget from 300 to 5,000 steps); any twin already exported that was not made under this registration
after it was committed (:func:`~study.registrations.policy.load_registered`), or, held out, after the frozen fit; the
held-out phase before the fit is committed, or with a fit made on other calibration twins than those exported.

**Order and record.** Seed by seed across the cells, the controls spread evenly among the seeds (:func:`interleaved`):
a phase cut short covers every cell, controls included. Every run from a clean tree at one commit, one thread; each
exported as it finishes to ``study/corpus/twins/<phase>/<twin>.json.gz``, refused unless it names that commit with
``uncommitted_changes: false`` and the registered overhead setting, with its CPU seconds, capgeo's measured share
(the summary's ``overhead``) and the registration's path and sha256. A launch resumes its phase: exported twins are
skipped, and a finished one not yet exported is exported first.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from capgeo_callbacks import CommutatorDefectMonitor, EvaluationSchedule
from capgeo_callbacks.run.schedule import evaluation_steps
from capgeo_callbacks.sweeps import FunctionTrial, launch, resolve_function
from capgeo_callbacks.sweeps.trials import read_trial_record
from study.checkout import ROOT, require_clean_tree
from study.phases import functions
from study.phases import twins_analysis as analysis
from study.phases.corpus import trial_summary, write_packed
from study.phases.functions import registered_function
from study.phases.twins_cells import FOLDER, RUNS, cell_name, family
from study.registrations.policy import committed, load_registered, registered_before, sha256
from sweep import TrainTrial

REGISTRATION, FITTED = analysis.REGISTRATION, analysis.FITTED
PHASES = ("calibration", "heldout")
READS = ("cells", "train.py", "grokking", "seeds", "overhead_budget", "threads")
MARKERS = ("TEMPLATE", "DRAFT")  # a file holding one of these keys is not a registration
MIN_DEFECT_VALUES = 8  # commutator defect values every twin records before the primary landmark
Twin = TrainTrial | FunctionTrial
T = TypeVar("T")


def shown(path: Path) -> str:
    """``path`` as a summary records it: relative to the checkout where it lies inside it, else its name."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def draft_marker(found: Mapping[str, Any]) -> str | None:
    """The marker (``TEMPLATE``, ``DRAFT``) that says a file is not a registration; None for a registration."""
    return next((key for key in MARKERS if key in found), None)


def registration(path: Path = REGISTRATION) -> dict[str, Any]:
    """The registration at ``path``, refused (SystemExit, naming why) if it is missing, marked a draft or template,
    lacks a field the runner reads or has a cell not filled in from the pilots."""
    if not path.exists():
        raise SystemExit(f"no registration at {shown(path)}: the twins run only under a committed one (its draft: "
                         "study/twins_registration_draft.json)")
    found = json.loads(path.read_text())
    if marker := draft_marker(found):
        raise SystemExit(f"{shown(path)} is marked {marker}: not a registration, no twin runs under it")
    if lacking := [key for key in READS if key not in found]:
        raise SystemExit(f"{shown(path)} lacks {', '.join(lacking)}: the runner reads {', '.join(READS)}")
    unfilled = [cell for cell in found["cells"] if not isinstance(cell, dict) or cell.get("example_only")]
    if unfilled or not found["cells"]:
        raise SystemExit(f"{shown(path)}: its cells are not filled in from the pilots ({unfilled[:1] or 'none'})")
    return found


def twin_name(cell: str, seed: int, control: bool) -> str:
    """``sort-medium-b450-s3100``; a control ``...-s3190-control``."""
    return f"{cell}-s{seed}{'-control' if control else ''}"


def interleaved(seeds: Sequence[T], controls: Sequence[T]) -> list[T]:
    """``seeds`` in order with ``controls`` spread evenly among them: control k before seed index (k + 1/2) n / c,
    rounded half up (12 seeds and 2 controls: after the 3rd seed and after the 9th; 1 and 1: after it)."""
    before = [math.floor((k + 0.5) * len(seeds) / len(controls) + 0.5) for k in range(len(controls))]
    found: list[T] = []
    for index, seed in enumerate([*seeds, None]):
        found += [control for control, at in zip(controls, before, strict=True) if at == index]
        if index < len(seeds):
            found.append(seed)  # type: ignore[arg-type]
    return found


def twin(found: Mapping[str, Any], cell: Mapping[str, Any], seed: int, control: bool, phase: str,
         runs: Path | None = None) -> Twin:
    """One registered run: a train.py trial (the cell's arguments, the shared ones, the registered overhead budget,
    the seed) or a call of the grokking function (the shared configuration, the cell's, the seed)."""
    name, folder = twin_name(cell["cell"], seed, control), (runs or RUNS) / phase
    tags = {"phase": phase, "cell": cell["cell"], "seed": seed, "control": control}
    if cell["family"] == "tasks":
        argv = (*map(str, cell["argv"]), *map(str, found["train.py"]["argv"]), "--overhead-budget",
                str(found["overhead_budget"]), "--seed", str(seed), *(("--shuffle-answers",) if control else ()))
        return TrainTrial(name, argv, logdir=folder, tags=tags, cpus=found["threads"])
    config = {**found["grokking"]["fixed"], **cell["config"], "seed": seed, "control": control}
    function = registered_function(functions.grokking, found["grokking"]["function"])
    return FunctionTrial(name, function, config, logdir=folder, tags=tags, cpus=found["threads"])


def defect_values(budget: int, points: int, schedule: str, every: int, share: float = analysis.PRIMARY) -> int:
    """The commutator defect values a run records before ``share`` of its budget: every ``every``-th of its
    evaluations (step 0 the first) on its schedule."""
    steps = evaluation_steps(budget, points, schedule)
    return sum(step < share * budget for index, step in enumerate(steps) if index % every == 0)


def measuring(trial: Twin) -> tuple[str, int, int, str, int | None]:
    """What a twin's code will do, read from it before it runs: its cell's name for its settings, its budget, its
    evaluation points and schedule, and its commutator defect's cadence (None: not measured)."""
    if isinstance(trial, TrainTrial):
        import train

        try:
            args = trial.args
        except ValueError as err:
            raise SystemExit(f"{trial.name}: train.py refuses its arguments: {err}") from None
        callbacks = train.build_measure_callbacks(args.measure_names, run_info={}, answer_len=1)
        name = cell_name({"task": args.task, "difficulty": args.difficulty, "max_steps": args.max_steps})
        return name, args.max_steps, args.eval_points, args.eval_schedule, _cadence(callbacks)
    module = inspect.getmodule(resolve_function(trial.function))  # the example the function is defined in
    try:
        settings = module.Settings.from_config(trial.settings)
    except ValueError as err:
        raise SystemExit(f"{trial.name}: {err}") from None
    callbacks = module.capgeo_callbacks(settings)
    [schedule] = [callback for callback in callbacks if isinstance(callback, EvaluationSchedule)]
    name = cell_name({key: getattr(settings, key) for key in ("operation", "fraction", "weight_decay")})
    return name, settings.max_steps, schedule.points, schedule.schedule, _cadence(callbacks)


def _cadence(callbacks: Sequence[Any]) -> int | None:
    return next((callback.every_n_evals for callback in callbacks if isinstance(callback, CommutatorDefectMonitor)),
                None)


def check_cell(found: Mapping[str, Any], cell: Mapping[str, Any]) -> None:
    """A cell's name is its settings' and says its family; its twins record at least :data:`MIN_DEFECT_VALUES`
    commutator defect values before the primary landmark."""
    if cell.get("family") != family(cell["cell"]) or ("argv", "config")[cell["family"] == "grokking"] \
            not in cell:
        raise SystemExit(f"cell {cell['cell']}: family {cell.get('family')!r} with {sorted(cell)}, but its name says "
                         f"{family(cell['cell'])!r} (a tasks cell has argv, a grokking cell config)")
    name, budget, points, schedule, every = measuring(twin(found, cell, 0, False, PHASES[0]))
    if name != cell["cell"]:
        raise SystemExit(f"cell {cell['cell']}: its settings make the cell {name}")
    values = 0 if every is None else defect_values(budget, points, schedule, every)
    if values < MIN_DEFECT_VALUES:
        raise SystemExit(f"cell {cell['cell']}: {values} commutator defect values before {analysis.PRIMARY:.0%} of "
                         f"its budget ({budget} steps), fewer than {MIN_DEFECT_VALUES}: measure it (train.py "
                         "--measures default,commutator; grokking commutator=true) or more often")


def jobs(phase: str, path: Path = REGISTRATION, runs: Path | None = None) -> list[Twin]:
    """The registered runs of ``phase``, seed by seed across the cells with the controls interleaved, every cell
    checked first (:func:`check_cell`)."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; phases: {', '.join(PHASES)}")
    found = registration(path)
    for cell in found["cells"]:
        check_cell(found, cell)
    part = found["seeds"][phase]
    order = interleaved([(int(seed), False) for seed in part["seeds"]],
                        [(int(seed), True) for seed in part["control_seeds"]])
    return [twin(found, cell, seed, control, phase, runs) for seed, control in order for cell in found["cells"]]


def target(trial: Twin, folder: Path | None = None) -> Path:
    return (folder or FOLDER) / trial.tags["phase"] / f"{trial.name}.json.gz"


def export(trial: Twin, found: Mapping[str, Any], path: Path, commit: str, folder: Path | None = None) -> Path:
    """A finished twin's summary, bound to the registration, into ``study/corpus/twins/<phase>/``; refused (SystemExit)
    unless it was made from the clean tree at ``commit`` under the registered overhead setting."""
    summary = trial_summary(trial, commit)
    if summary is None:
        raise SystemExit(f"{trial.name} has not finished: nothing to export")
    record = read_trial_record(trial.root) if trial.kind == "function" else None
    made = (summary.get("commit"), summary.get("uncommitted_changes")) if record is None else \
        (record.get("commit"), not record.get("tree_clean"))
    if made != (commit, False):
        raise SystemExit(f"{trial.name} was made at {made[0]} (uncommitted changes: {made[1]}), not from the clean "
                         f"tree at {commit} this phase runs from: not exported (remove {trial.root} to run it again)")
    setting = (summary.get("overhead") or {}).get("setting")
    if setting != found["overhead_budget"]:
        raise SystemExit(f"{trial.name} ran with the overhead budget {setting!r}, not the registered "
                         f"{found['overhead_budget']!r}: not exported")
    tags = trial.tags
    summary.update(name=trial.name, phase=tags["phase"], cell=tags["cell"], seed=tags["seed"],
                   control=tags["control"], registration={"path": shown(path), "sha256": sha256(path)})
    return write_packed(summary, target(trial, folder))


def exported(phase: str, path: Path = REGISTRATION) -> list[dict[str, Any]]:
    """The exported twins of ``phase``, every one made under the registration after it was committed (and, held
    out, after the frozen fit); any other refuses them all. None while there is no registration, and a twin exported
    without one is refused."""
    folder = FOLDER / phase
    if not path.exists():
        if any(folder.glob("*.json.gz")):
            raise SystemExit(f"{shown(folder)} holds twins but {shown(path)} does not exist: no twin before the "
                             "registration")
        return []
    found = load_registered(folder, path)
    if phase == "heldout":
        early = [summary["name"] for summary in found if not registered_before(FITTED, summary.get("commit"))]
        if early:
            raise SystemExit(f"held-out twins made before {shown(FITTED)} was committed: {', '.join(early[:5])}")
    return found


def check_fit(path: Path = REGISTRATION) -> None:
    """The held-out twins start once the fit is committed, made on the calibration twins exported."""
    if not (FITTED.exists() and committed(FITTED)):
        raise SystemExit("the held-out twins start after the calibration fit: python -m study.phases.twins fit, then "
                         f"commit {shown(FITTED)}")
    fitted = json.loads(FITTED.read_text()).get("calibration_runs")
    calibration = sorted(run.name for run in analysis.twin_runs(exported("calibration", path)))
    if fitted != calibration:
        raise SystemExit(f"{shown(FITTED)} was fitted on {len(fitted or [])} calibration twins, not on the "
                         f"{len(calibration)} exported: fit again (python -m study.phases.twins fit) and commit it")


def run_phase(phase: str, engine: str = "ray", workers: int = 2, path: Path = REGISTRATION) -> list[Path]:
    """Run (or resume) every registered twin of ``phase`` not yet exported, through the launcher, one thread each;
    export each as it finishes (module docstring: what is refused first)."""
    commit = require_clean_tree(f"the registered twins ({phase})")
    found = registration(path)
    if not committed(path):
        raise SystemExit(f"{shown(path)} is not committed as it is: commit the registration first")
    trials = jobs(phase, path)
    if phase == "heldout":
        check_fit(path)
    for each in PHASES:
        exported(each, path)
    left = [trial for trial in trials if not target(trial).exists()]
    written = [export(trial, found, path, commit) for trial in left if trial.state()[0] == "finished"]
    todo = [trial for trial in left if not target(trial).exists()]

    def finished(outcome: Any) -> None:  # exported as each ends: a session that dies keeps what finished
        if outcome.trial.state()[0] == "finished":
            written.append(export(outcome.trial, found, path, commit))

    if todo:
        launch(todo, engine=engine, jobs=workers, on_outcome=finished)
    return written


def fit_calibration(path: Path = REGISTRATION) -> dict[str, Any]:
    """Both models fitted on every registered calibration twin (:func:`study.phases.twins_analysis.fit`); refused
    while any is not exported (no seed is left out)."""
    missing = [trial.name for trial in jobs("calibration", path) if not target(trial).exists()]
    if missing:
        raise SystemExit(f"{len(missing)} registered calibration twins are not exported yet ({', '.join(missing[:3])}"
                         f"{' ...' if len(missing) > 3 else ''}): python -m study.phases.twins calibration run")
    return analysis.fit(exported("calibration", path))
