"""Train a capgeo transformer on an algorithmic task with the geometry callbacks attached.

    python train.py --task sort --difficulty hard

Logs to TensorBoard under ``--logdir`` (``tensorboard --logdir runs``), saves checkpoints, and prints
the precursor verdict at the end.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger

import tasks
from capgeo_callbacks import (
    DetectionSettings,
    EvaluationSchedule,
    PrecursorDetector,
    RankMeMonitor,
)
from capgeo_callbacks.callbacks.step_progress_bar import BarSafeHandler, StepProgressBar
from capgeo_callbacks.detection import detect_hold, split_points
from capgeo_callbacks.publish.text import rules_table, verdict_table
from capgeo_callbacks.registry import build_measure_callbacks as registry_callbacks
from capgeo_callbacks.registry import (
    default_measures,
    get_measure,
    measure_names,
    measure_specs,
    measure_transitions,
)
from capgeo_callbacks.rules import RankMeRecoveryRule, Rule
from capgeo_callbacks.run.reading import newest_version, overhead_line, version_number
from capgeo_callbacks.run.schedule import linear_interval
from capgeo_callbacks.run.summary import json_safe
from models import CapabilityModule
from tasks.budgets import budget
from tasks.chance import chance_level
from tasks.space import MIN_EVAL_QUESTIONS
from train_cli import parse_args

log = logging.getLogger("capgeo.train")

# Measures `--measures` can name, from the measure registry (capgeo_callbacks.registry, docs/measures.md) as it
# was when train.py was imported: "default" is rankme + probes, "all" adds the costly ones. The functions below
# read the registry itself, so a measure registered later is taken too.
MEASURES = measure_names()
DEFAULT_MEASURES = default_measures()
# RankMe reads one row per validation example, at the position that predicts the first answer token: a
# measured choice (README, "Which rows RankMe reads"); 512 rows, the size of the smallest validation set.
RANKME_SELECTOR = "first_answer"
RANKME_ROWS = 512
PROBE_ROWS = 2048  # probe rows per layer, at most: answer positions (labels are the answer tokens)
MIN_VAL_EXAMPLES = MIN_EVAL_QUESTIONS  # validation and test sets: the 512 distinct questions every split holds
WATCHED_LAYERS = ("model.blocks.*", "model.norm_f")  # residual stream after each block, final norm
SETTINGS = DetectionSettings(validation_size=MIN_VAL_EXAMPLES)  # the study's rule; labels on 512 questions


# Constructor arguments of each measure's callback: the registry's cadence and options (measured choices,
# capgeo_callbacks/registry/builtin.py) with train.py's layers and rows; embedding code and tests may change them
# (e.g. fewer LLC draws) before calling ``main``. A measure registered after import takes its registry defaults.
LAYERS_AND_ROWS: dict[str, dict[str, Any]] = {
    "rankme": {"layers": WATCHED_LAYERS, "selector": RANKME_SELECTOR, "num_rows": RANKME_ROWS},
    "probes": {"layers": WATCHED_LAYERS, "num_rows": PROBE_ROWS},
}
MEASURE_OPTIONS: dict[str, dict[str, Any]] = {
    spec.name: spec.callback_options(**LAYERS_AND_ROWS.get(spec.name, {})) for spec in measure_specs()
}
MEASURE_CALLBACKS: dict[str, type[Callback]] = {spec.name: spec.callback for spec in measure_specs()}
# Extra constructor arguments of the PrecursorDetector (e.g. {"live_figures": False}): embedding code, benchmarks.
DETECTOR_OPTIONS: dict[str, Any] = {}


def build_measure_callbacks(names: Sequence[str], run_info: dict[str, Any],
                            extra_selectors: Sequence[str] = (), answer_len: int | None = None,
                            rules: Sequence[Rule] = ()) -> list[Callback]:
    """The capgeo callbacks for the chosen measures, in the registry's order, each built from
    :data:`MEASURE_OPTIONS` (its registry defaults for a measure not there), with the precursor detector
    always. Each of ``extra_selectors`` adds a RankMe monitor with that token selector under the tag prefix
    ``rankme_<selector>`` (detection reads the default ``rankme/``; ILDR is measured on the default rows only). The
    detector keeps the overhead budget ``run_info["overhead_budget"]`` (a share, ``"measure"``, or none when it is not
    there): a run fixes it and records it."""
    options = {name: dict(MEASURE_OPTIONS[name]) if name in MEASURE_OPTIONS else get_measure(name).callback_options()
               for name in measure_names()}
    if answer_len is not None:  # the answer rows the validation set has (no warning about fewer rows)
        options["probes"]["num_rows"] = min(options["probes"]["num_rows"], MIN_VAL_EXAMPLES * answer_len)
    callbacks = registry_callbacks(names, options)  # ILDR switched on in RankMe's monitor, on its rows
    callbacks += [RankMeMonitor(**{**options["rankme"], "selector": selector, "prefix": f"rankme_{selector}",
                                   "ildr_prefix": None}) for selector in extra_selectors
                  if selector != options["rankme"]["selector"]]
    # detection reads the chosen measures' transitions (capgeo's own are in SETTINGS' default already)
    transitions = {**measure_transitions(spec for spec in measure_specs() if spec.name in names),
                   **SETTINGS.measure_transitions}
    settings = SETTINGS if transitions == SETTINGS.measure_transitions else \
        SETTINGS.replace(measure_transitions=transitions)
    # always: it records every scalar and writes the summary, with or without measures
    callbacks.append(PrecursorDetector(monitor="val/acc", run_info=run_info, settings=settings,
                                       rules=[RankMeRecoveryRule(settings), *rules],
                                       overhead_budget=run_info.get("overhead_budget"), **DETECTOR_OPTIONS))
    return callbacks


def provenance() -> dict[str, Any]:
    """Where a run was made, as far as the launching side knows it: the code's commit and whether the tree was
    clean, checked with ``git`` where the checkout has it, else taken from ``CAPGEO_COMMIT`` and
    ``CAPGEO_TREE_CLEAN`` set by the machine that launched the run (a copied tree has no ``.git``); the thread
    count and the library versions. The accelerator is recorded once the trainer has chosen it
    (``RunCost.on_fit_start``)."""
    commit = os.environ.get("CAPGEO_COMMIT")
    clean_env = os.environ.get("CAPGEO_TREE_CLEAN")
    clean = None if clean_env is None else clean_env.lower() in ("1", "true", "yes")
    try:
        root = Path(__file__).resolve().parent
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True, timeout=10).stdout.strip() or commit
        clean = not subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                   capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return {"commit": commit, "uncommitted_changes": None if clean is None else not clean,
            "threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "torch": str(torch.__version__), "lightning": str(pl.__version__)}


def accelerator_name(device: torch.device) -> str:
    """The accelerator a run actually trained on: the GPU's name, or the CPU's."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()})"


class RunCost(Callback):
    """What a run cost, carried in its checkpoints so a resumed run's totals are whole: CPU and wall seconds
    since ``fit`` began, summed over every part, and how many times it was resumed; at the end of fitting it adds
    them, with the accelerator and the machine, to the run info of the run's session, so the summary is written
    once with them. Given its run's :class:`PrecursorDetector` and listed before it, whose ``on_fit_end`` writes the
    summary.

    A part killed before it wrote a summary still counts up to its last checkpoint (the time after that
    checkpoint is recomputed by the resumed part, and counted there)."""

    def __init__(self, detector: PrecursorDetector | None = None) -> None:
        self.detector = detector
        self.cpu_seconds = 0.0
        self.wall_seconds = 0.0
        self.resumes = 0
        self.accelerator: str | None = None
        self._started: tuple[float, float] | None = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._started = (time.process_time(), time.perf_counter())
        self.accelerator = accelerator_name(trainer.strategy.root_device)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.detector is not None:
            self.detector.session.add_run_info(self.fields())

    def fields(self) -> dict[str, Any]:
        """What the summary records of the cost: the totals, the accelerator and the machine."""
        return {**self.totals(), "accelerator": self.accelerator, "machine": f"{platform.node()} ({self.accelerator})"}

    def totals(self) -> dict[str, Any]:
        cpu, wall = self.cpu_seconds, self.wall_seconds
        if self._started is not None:
            cpu += time.process_time() - self._started[0]
            wall += time.perf_counter() - self._started[1]
        return {"cpu_seconds": cpu, "wall_seconds": wall, "resumes": self.resumes}

    def state_dict(self) -> dict[str, Any]:
        return self.totals()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.cpu_seconds = float(state_dict.get("cpu_seconds", 0.0))
        self.wall_seconds = float(state_dict.get("wall_seconds", 0.0))
        self.resumes = int(state_dict.get("resumes", 0)) + 1


def check_logdir(logdir: str) -> Path:
    """Create ``logdir`` or fail early with a clear message, before any training."""
    path = Path(logdir)
    try:
        path.mkdir(parents=True, exist_ok=True)
        # a probe file of this process's own (not a fixed name): runs started at once into one folder
        # must not delete each other's probe
        with tempfile.NamedTemporaryFile(dir=path, prefix=".capgeo_write_test_"):
            pass
    except OSError as err:
        raise SystemExit(f"error: --logdir {logdir!r} is not writable: {err}") from err
    return path


# the factory make_datamodule calls, by dotted path: recorded in the summary for offline analysis
DATAMODULE_FACTORY = f"{tasks.make_datamodule.__module__}.{tasks.make_datamodule.__qualname__}"


def make_datamodule(args: argparse.Namespace) -> tasks.TaskDataModule:
    """The task's datamodule, with ``MIN_VAL_EXAMPLES`` validation (and test) examples.

    Validation runs ~256 times a run, so its size is what a run's evaluation costs: 512 examples give RankMe
    its 512 rows (one per example), accuracy in steps of 0.2%, and the probes up to ``PROBE_ROWS`` answer
    rows (fewer on short answers: 512 on mod's one answer token).
    """
    return tasks.make_datamodule(args.task, args.difficulty, seed=args.seed, batch_size=args.batch_size,
                                 val_size=MIN_VAL_EXAMPLES, test_size=MIN_VAL_EXAMPLES, eval_batch_size=1024,
                                 shuffle_answers=args.shuffle_answers, params=args.task_params)


class StopWhenLearned(Callback):
    """Stop training ``evaluations`` evaluations after accuracy has held the ``detector``'s ``full_threshold``
    (0.9) for ``patience`` evaluations: the record then shows the whole climb and what follows it. Listed after the
    detector, so that it reads the validation the detector has just recorded."""

    def __init__(self, detector: PrecursorDetector, evaluations: int = 0) -> None:
        self.detector = detector
        self.evaluations = evaluations

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        detector = self.detector
        if trainer.sanity_checking:
            return
        steps, accs = split_points(detector.acc)
        settings = detector.settings
        held = detect_hold(steps, accs, settings.full_threshold, settings.patience)
        if held is not None and len(steps) - 1 - (steps.index(held) + settings.patience - 1) >= self.evaluations:
            trainer.should_stop = True


CHECKPOINT_EVERY_N_EVALS = 16  # last.ckpt is saved after every 16th validation (and at the end)


class EvaluationCheckpoint(Callback):
    """Save ``last.ckpt`` after every ``every_n_evals``-th validation and at the end of training.

    Not ``ModelCheckpoint(every_n_train_steps=...)``: it saves in ``on_train_batch_end``, before the
    validation due at that step, and a run resumed from it skips that validation (a gap in every series).
    Saved in ``on_validation_end``, listed after the capgeo callbacks, the checkpoint holds the
    validation's values and the resumed run goes on with the next training step.
    """

    def __init__(self, dirpath: Path, every_n_evals: int, keep_every_evaluation: bool = False) -> None:
        self.dirpath = Path(dirpath)
        self.path = self.dirpath / "last.ckpt"
        self.every_n_evals = every_n_evals
        self.keep_every_evaluation = keep_every_evaluation
        self.evaluations = 0

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.evaluations += 1
        if self.keep_every_evaluation:  # the weights only: what offline analysis measures
            trainer.save_checkpoint(self.dirpath / f"step={trainer.global_step}.ckpt", weights_only=True)
        if self.evaluations % self.every_n_evals == 0:
            trainer.save_checkpoint(self.path, weights_only=False)  # every rank calls it; rank zero writes

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        trainer.save_checkpoint(self.path, weights_only=False)

    def state_dict(self) -> dict[str, Any]:
        return {"evaluations": self.evaluations}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.evaluations = int(state_dict.get("evaluations", 0))


def build_trainer(args: argparse.Namespace, callbacks: list[Callback], logger: TensorBoardLogger) -> pl.Trainer:
    """The Trainer of a run: validation at the schedule's steps over the whole budget (also under
    ``--stop-at-step``), checkpoints after validations, deterministic kernels."""
    schedule = EvaluationSchedule(max_steps=args.max_steps, points=args.eval_points, schedule=args.eval_schedule)
    checkpoint = EvaluationCheckpoint(Path(logger.log_dir) / "checkpoints", every_n_evals=CHECKPOINT_EVERY_N_EVALS,
                                      keep_every_evaluation=args.keep_checkpoints)
    return pl.Trainer(
        max_steps=args.stop_at_step,  # the module's schedule and the evaluation schedule run over args.max_steps
        val_check_interval=1,  # the EvaluationSchedule decides which steps validate
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        log_every_n_steps=max(1, min(50, linear_interval(args.max_steps, args.eval_points))),
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        logger=logger,
        callbacks=[*callbacks, schedule, checkpoint, *([] if args.no_progress else [StepProgressBar()])],
        enable_checkpointing=False,
        enable_progress_bar=not args.no_progress,
        enable_model_summary=False,
        deterministic=True,
    )


def main(argv: Sequence[str] | None = None, callbacks: Sequence[Callback] = ()) -> dict[str, Any]:
    """Run ``train.py`` with the command-line arguments ``argv``; ``callbacks`` are extra Lightning
    callbacks added to the trainer (for embedding and tests). Returns the run summary."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s",
                        handlers=[BarSafeHandler()])
    logdir = check_logdir(args.logdir)
    pl.seed_everything(args.seed, workers=True, verbose=False)

    datamodule = make_datamodule(args)
    module = CapabilityModule(
        size=args.size, vocab_size=datamodule.vocab_size, max_seq_len=datamodule.seq_len, lr=args.lr,
        weight_decay=args.weight_decay, warmup_steps=args.warmup_steps, max_steps=args.max_steps,
        lr_schedule=args.lr_schedule,
    )
    run_root = logdir / args.name
    ckpt_path: str | None = None
    version = None
    if args.resume:
        newest = newest_version(run_root)
        version = None if newest is None else version_number(newest)
        last = None if newest is None else newest / "checkpoints" / "last.ckpt"
        if last is None or not last.exists():
            raise SystemExit(f"error: --resume given but no checkpoint found under {run_root}/version_*/checkpoints")
        ckpt_path = str(last)
    logger = TensorBoardLogger(save_dir=str(logdir), name=args.name, version=version, default_hp_metric=False)

    run_info = {
        "task": args.task, "difficulty": args.difficulty, "size": args.size, "seed": args.seed,
        "parameters": module.model.num_parameters(), "max_steps": args.max_steps, "stop_at_step": args.stop_at_step,
        "eval_schedule": args.eval_schedule, "eval_points": args.eval_points, "warmup_steps": args.warmup_steps,
        "lr_schedule": args.lr_schedule, "measure_names": args.measure_names, "overhead_budget": args.overhead_budget,
        "negative_control": budget(args.task, args.difficulty).negative_control,
        "shuffled_answers": args.shuffle_answers,
        "batch_size": args.batch_size, "lr": args.lr, "weight_decay": args.weight_decay,
        "task_params": datamodule.params, "validation_size": datamodule.val_size,
        "chance": chance_level(datamodule).to_dict(), **provenance(),
        # what rebuilds the same validation rows offline (python -m capgeo_callbacks.offline): factory and arguments
        "datamodule_factory": DATAMODULE_FACTORY,
        "datamodule": {"seed": datamodule.seed, "batch_size": datamodule.batch_size, "val_size": datamodule.val_size,
                       "test_size": datamodule.test_size, "eval_batch_size": datamodule.eval_batch_size},
    }
    rules, run_info["registration"] = args.registered
    measures = build_measure_callbacks(args.measure_names, run_info=run_info, extra_selectors=args.extra_selectors,
                                       answer_len=datamodule.answer_len, rules=rules)
    # the run's detector, built last (none where embedding code builds no callback), handed to those that read it
    detector = measures[-1] if measures and isinstance(measures[-1], PrecursorDetector) else None
    if args.stop_when_learned and detector is not None:
        measures.append(StopWhenLearned(detector, args.evals_after_learned))
    run_cost = RunCost(detector)
    trainer = build_trainer(args, [run_cost, *measures, *callbacks], logger)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    written = json_safe(detector.summary) if detector is not None else {**run_cost.fields(), **run_info}
    summary = {**written, "run_dir": logger.log_dir}
    if trainer.is_global_zero:
        print_summary(summary, trainer)
    return summary


def print_summary(summary: dict[str, Any], trainer: pl.Trainer) -> None:
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    print(f"\nrun folder: {summary['run_dir']}  ({summary['wall_seconds']:.0f} s)")
    steps, steps_budget = summary.get("steps", summary.get("stop_at_step")), summary["max_steps"]
    print(f"{summary['task']}/{summary['difficulty']} size {summary['size']} "
          f"({summary['parameters']:,} parameters), " + (f"{steps_budget} steps" if steps in (None, steps_budget)
                                                          else f"{steps} of {steps_budget} steps"))
    if metrics:
        print("final: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items())))
    if "verdict" in summary:
        print(verdict_table(summary))
    if rules := rules_table(summary):
        print(rules)
    if cost := overhead_line(summary):
        print(cost)


def quiet_lightning() -> None:
    """Keep the command's output about the run: Lightning's notices about its own set-up (accelerators found,
    a logger tip, the validation cadence that EvaluationSchedule replaces) and its internal deprecation
    warnings are not."""
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=Warning)


if __name__ == "__main__":
    quiet_lightning()
    torch.set_float32_matmul_precision("high")
    os.environ.setdefault("PYTHONHASHSEED", "0")
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
