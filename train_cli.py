"""train.py's command line: its arguments, their defaults and checks, read by train.py and by the launcher (which
checks a trial's arguments before any trial starts, without importing train.py).

The study's registered warning and forecaster (``--registration``) are data: a JSON file the library loads
(:func:`~capgeo_callbacks.rules.rules_from_registration`); nothing here imports the study.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tasks
from capgeo_callbacks.capture.selectors import SELECTORS
from capgeo_callbacks.registry import measures_help, resolve_measures
from capgeo_callbacks.rules import Rule, rules_from_registration
from capgeo_callbacks.run.budget import DEFAULT_OVERHEAD_BUDGET, MEASURE, overhead_budget_arg
from capgeo_callbacks.run.schedule import SCHEDULES
from models import SIZES
from models.lightning_module import LR_SCHEDULES
from tasks.budgets import Budget, budget

ROOT = Path(__file__).resolve().parent
EVALUATION_POINTS = 256  # about 256 evaluations per run (docs/design.md, "When to measure")
EVALS_AFTER_LEARNED = 8  # python -m study.phases.calibration_cpu window: late fall-backs counted on whole runs
# the study's frozen warning and forecaster (python -m study.registrations.forecast register), a file of data
REGISTRATION = ROOT / "study" / "registration.json"


def registered_rules(path: str | Path = REGISTRATION) -> tuple[list[Rule], dict[str, Any] | None]:
    """The rules a registration file freezes (run beside rankme-recovery) and what the summary records of it (its
    path relative to the checkout, sha256 and rules' names); none for ``none`` or the default file not made yet."""
    if str(path) == "none" or (Path(path) == REGISTRATION and not REGISTRATION.exists()):
        return [], None
    return rules_from_registration(path, relative_to=ROOT)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Train a capgeo transformer with RankMe and precursor detection.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--task", required=True, choices=tasks.TASKS, help="algorithmic task")
    parser.add_argument("--difficulty", default="hard", choices=tasks.DIFFICULTIES, help="task difficulty")
    parser.add_argument("--size", default=None, choices=list(SIZES), help="model size (default: per task)")
    parser.add_argument("--max-steps", type=int, default=None, help="training steps (default: per task)")
    parser.add_argument("--batch-size", type=int, default=None, help="batch size (default: per task)")
    parser.add_argument("--lr", type=float, default=None, help="peak learning rate (default: per task)")
    parser.add_argument("--warmup-steps", type=int, default=None,
                        help=f"linear learning-rate warm-up, in steps (default: the level's, {Budget.warmup_steps}, "
                             "but at most a tenth of --max-steps; a value given here is used as it is)")
    parser.add_argument("--lr-schedule", default="cosine", choices=LR_SCHEDULES,
                        help="after the warm-up: 'cosine' decay to a tenth of --lr at --max-steps, or 'constant'")
    parser.add_argument("--seed", type=int, default=0, help="seed for data, initialisation and training")
    parser.add_argument("--measures", default="default", help=measures_help())
    parser.add_argument("--overhead-budget", default=MEASURE, metavar="SHARE|measure|off",
                        help="'measure' (the default here: a bench run is data, every series whole): time capgeo's "
                             "work and thin nothing; a share such as "
                             f"{DEFAULT_OVERHEAD_BUDGET} (the library's default): capgeo's own time at most that share "
                             "of the run's, over the whole run: after the first tenth of the steps, optional work is "
                             "thinned first and the rules' inputs last, to an even cadence, said once; 0 or 'off': no "
                             "budget. The summary's 'overhead' says what capgeo cost")
    parser.add_argument("--eval-points", type=int, default=EVALUATION_POINTS, help="evaluations per run (about)")
    parser.add_argument("--eval-schedule", default="geometric", choices=SCHEDULES,
                        help="when to evaluate: 'geometric' (step 0, a quarter of the points geometrically over the "
                             "first tenth of the budget, the rest evenly) or 'linear' (step 0, then evenly)")
    parser.add_argument("--logdir", default="runs", help="TensorBoard log folder")
    parser.add_argument("--name", default=None, help="run name (default: TASK-DIFFICULTY-SIZE-sSEED)")
    parser.add_argument("--resume", action="store_true", help="resume the latest version of this run")
    parser.add_argument("--devices", default="1", help="Lightning devices (e.g. 1, 2, auto)")
    parser.add_argument("--strategy", default="auto", help="Lightning strategy (e.g. auto, ddp)")
    parser.add_argument("--accelerator", default="auto", help="Lightning accelerator (auto, cpu, gpu, ...)")
    parser.add_argument("--extra-selectors", default="",
                        help="also measure RankMe with these comma-separated token selectors, each under "
                             f"rankme_<selector>/ (valid: {', '.join(SELECTORS)})")
    parser.add_argument("--task-params", default=None, metavar="JSON",
                        help="override the level's parameters (calibration), e.g. '{\"digits\": 6}'; the summary "
                             "records the parameters used")
    parser.add_argument("--registration", default=str(REGISTRATION), metavar="FILE",
                        help="a registration of the warning and forecaster (python -m study.registrations.forecast "
                             "register): run them live beside rankme-recovery and record the file's sha256 ('none': "
                             "rankme-recovery only)")
    parser.add_argument("--shuffle-answers", action="store_true",
                        help="a negative control: training answers permuted across each batch, so nothing can be "
                             "learned (validation keeps the true answers)")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="also keep the weights after every evaluation (checkpoints/step=N.ckpt), for offline "
                             "analysis (python -m capgeo_callbacks.offline RUN_DIR)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--stop-when-learned", action="store_true",
                        help="end the run --evals-after-learned evaluations after val/acc has held 0.9 for 3 "
                             "evaluations (sweeps and the corpus: the rest of the budget adds nothing to the record)")
    parser.add_argument("--evals-after-learned", type=int, default=EVALS_AFTER_LEARNED,
                        help="evaluations to keep after 0.9 has held, with --stop-when-learned (the default is "
                             "counted on whole runs: docs/design.md, 'How long an acquired run is recorded')")
    parser.add_argument("--stop-at-step", type=int, default=None,
                        help="end the run at this step (default: --max-steps); the schedule and evaluation cadence "
                             "still follow --max-steps, so the run is the start of the full one and --resume with a "
                             "later stop continues it")
    args = parser.parse_args(argv)
    defaults = budget(args.task, args.difficulty)
    args.max_steps = defaults.max_steps if args.max_steps is None else args.max_steps
    args.batch_size = defaults.batch_size if args.batch_size is None else args.batch_size
    args.lr = defaults.lr if args.lr is None else args.lr
    args.size = defaults.size if args.size is None else args.size
    if args.warmup_steps is None:  # the default, documented in --help; an explicit value is never capped
        args.warmup_steps = min(defaults.warmup_steps, max(1, args.max_steps // 10))
    args.weight_decay = defaults.weight_decay
    if args.max_steps < 1:
        parser.error(f"--max-steps must be at least 1, got {args.max_steps}")
    if args.batch_size < 1:
        parser.error(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.evals_after_learned < 0:
        parser.error(f"--evals-after-learned must be at least 0, got {args.evals_after_learned}")
    if not 0 <= args.warmup_steps <= args.max_steps:
        parser.error(f"--warmup-steps must be between 0 and --max-steps ({args.max_steps}), got {args.warmup_steps}")
    if args.eval_points < 1:
        parser.error(f"--eval-points must be at least 1, got {args.eval_points}")
    try:
        args.overhead_budget = overhead_budget_arg(args.overhead_budget)
    except ValueError as err:
        parser.error(f"--overhead-budget: {err}")
    if args.task_params is not None:
        try:
            args.task_params = json.loads(args.task_params)
            tasks.params.resolve_params(args.task, args.difficulty, args.task_params)
        except ValueError as err:
            parser.error(f"--task-params: {err}")
    args.stop_at_step = args.max_steps if args.stop_at_step is None else args.stop_at_step
    if not 1 <= args.stop_at_step <= args.max_steps:
        parser.error(f"--stop-at-step must be between 1 and --max-steps ({args.max_steps}), got {args.stop_at_step}")
    try:
        args.measure_names = resolve_measures(args.measures)
    except ValueError as err:
        parser.error(str(err))
    args.extra_selectors = [name.strip() for name in args.extra_selectors.split(",") if name.strip()]
    unknown = [name for name in args.extra_selectors if name not in SELECTORS]
    if unknown:
        parser.error(f"unknown selector(s) {', '.join(unknown)} in --extra-selectors; valid: {', '.join(SELECTORS)}")
    try:
        args.registered = registered_rules(args.registration)
    except (OSError, ValueError, KeyError, ImportError, AttributeError) as err:
        parser.error(f"--registration {args.registration}: {err}")
    args.devices = int(args.devices) if args.devices.isdigit() else args.devices
    args.name = args.name or f"{args.task}-{args.difficulty}-{args.size}-s{args.seed}"
    return args
