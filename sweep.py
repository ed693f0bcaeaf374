"""Sweep train.py over tasks x difficulties x sizes (x seeds) on Ray Tune or submitit, skipping finished runs and
resuming others: capgeo's bench in front of the package's launcher (:mod:`capgeo_callbacks.sweeps`), which knows
nothing of train.py; here a train.py run is a trial of it (:class:`TrainTrial`).

    python sweep.py --tasks mod sort --difficulties hard --sizes xs s --logdir runs/sweep --fraction 0.25 --jobs 2
    python sweep.py ... --address auto                 # on the Ray cluster this machine belongs to (docs/sweeps.md)
    python sweep.py ... --engine submitit              # Slurm (or local processes where there is none)
    python -m study.record.report runs/sweep

A training function of one's own is swept by the package's own command, ``capgeo sweep MODULE:FUNCTION --grid ...``.

Each run is one trial, writing to ``LOGDIR/TASK-DIFFICULTY-SIZE-sSEED`` (train.py's own naming), with its output in
``run.log`` beside the run's ``version_*`` folders. What the folder holds decides what is done
(:func:`capgeo_callbacks.sweeps.run_state`, the one definition of finished): finished runs are skipped, interrupted
ones resume from ``checkpoints/last.ckpt`` (train.py ``--resume``), anything else starts afresh.

``--fraction F`` runs the first F of each run's budget: train.py's ``--stop-at-step``, with the
learning-rate schedule and evaluation cadence of the whole budget, so the stopped run is exactly the start
of the full one and the report's progress axis (step / max_steps) stays comparable across sizes.

Threads: each run holds ``--threads`` cores (default cores // jobs), and its ``OMP_NUM_THREADS`` is that count, so
``--jobs 2`` on a 2-core machine runs two single-threaded runs side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import tasks
from capgeo_callbacks.sweeps import Outcome, capability_stopper, no_callbacks, run_state
from capgeo_callbacks.sweeps.cli import add_engine_arguments, check_engine_arguments, run
from capgeo_callbacks.sweeps.trials import Kind, State, Trial, TrialLike
from models import SIZES

__all__ = ["RESERVED_FLAGS", "ROOT", "TRIAL_FLAGS", "TrainTrial", "main", "parse_args", "plan_runs", "train_args"]

ROOT = Path(__file__).resolve().parent  # the checkout: train.py, tasks and models import from it
# train.py flags a trial sets from its name and folder; in its arguments they would break naming or resuming
TRIAL_FLAGS = ("--logdir", "--name", "--resume")
# train.py flags the sweep sets itself for every run; in --extra-args they would break naming or resuming.
RESERVED_FLAGS = ("--task", "--difficulty", "--size", "--seed", "--logdir", "--name", "--resume", "--stop-at-step")


@dataclass(frozen=True)
class TrainTrial(Trial):
    """One train.py run of a sweep or a study phase, ``TrainTrial(name, argv, logdir=...)``: a command trial of the
    launcher (:class:`~capgeo_callbacks.sweeps.trials.TrialLike`), run in the trial's process.

    Attributes:
        argv: train.py arguments, without ``--logdir``, ``--name`` or ``--resume``.
        name, logdir, tags, cpus, gpus: as every :class:`~capgeo_callbacks.sweeps.trials.Trial`.
    """

    argv: tuple[str, ...]
    kind: ClassVar[Kind] = "command"

    def __post_init__(self) -> None:
        super().__post_init__()
        given = [a for a in self.argv if a.split("=")[0] in TRIAL_FLAGS]
        if given:
            raise ValueError(f"trial {self.name}: train.py arguments must not set {', '.join(given)} "
                             f"(the trial sets them from its name and folder)")

    @property
    def import_roots(self) -> tuple[Path, ...]:
        return (ROOT,)

    @cached_property
    def args(self) -> argparse.Namespace:
        """train.py's parsed arguments (its defaults filled in); a ValueError with train.py's message if it
        rejects them."""
        return train_args(self.command())

    def command(self, resume: bool = False) -> list[str]:
        """The train.py arguments of this trial."""
        return [*self.argv, "--logdir", str(self.logdir), "--name", self.name, "--no-progress",
                *(["--resume"] if resume else [])]

    def check(self) -> None:
        self.args  # noqa: B018 - train.py's own check of the arguments

    def state(self) -> tuple[State, str]:
        return run_state(self.root, self.args.stop_at_step, self.args.stop_when_learned)

    def describe(self, resume: bool) -> str:
        return f"train.py {' '.join(self.command(resume))}"

    def execute(self, resume: bool, callbacks: list[Any]) -> Mapping[str, Any] | None:
        import torch

        import train

        torch.set_float32_matmul_precision("high")
        train.quiet_lightning()
        return train.main(self.command(resume=resume), callbacks=callbacks)


def train_args(argv: Sequence[str]) -> argparse.Namespace:
    """train.py's parsed arguments (``train_cli.parse_args``, its command line, not train.py itself), with its argparse
    error turned into a ValueError carrying the message."""
    import train_cli

    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):  # train.py's usage line would name the sweep: keep the message
            return train_cli.parse_args(argv)
    except SystemExit as err:
        message = captured.getvalue().strip().splitlines()[-1:] or ["invalid arguments"]
        raise ValueError(f"train.py rejected {' '.join(argv)}: {message[0].split('error: ', 1)[-1]}") from err


def _flag_present(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def plan_runs(
    tasks_: Sequence[str],
    difficulties: Sequence[str],
    sizes: Sequence[str],
    seeds: Sequence[int],
    logdir: str | Path,
    fraction: float | None = None,
    extra_args: Sequence[str] = (),
    cpus: float = 1.0,
    gpus: float = 0.0,
) -> list[TrainTrial]:
    """Every run of the sweep, in task, difficulty, size, seed order, as trials of the launcher.

    Each run's arguments are checked by ``train.parse_args`` here, so a bad extra argument fails before
    any run starts. A trial's ``tags`` hold its task, difficulty, size, seed, ``max_steps`` (the schedule's length)
    and ``stop_at_step`` (where it ends).

    Args:
        tasks_: task names.
        difficulties: difficulty names.
        sizes: model size names.
        seeds: seeds.
        logdir: the sweep's log folder.
        fraction: the share of each run's step budget to run (train.py's ``--stop-at-step``; the budget,
            and so the schedule, stays train.py's default or ``--max-steps`` from ``extra_args``); None runs
            the whole budget.
        extra_args: more train.py arguments, the same for every run.
        cpus: cores each run holds (its thread count).
        gpus: the share of a GPU each run holds.

    Raises:
        ValueError: on an unknown name, a reserved flag in ``extra_args``, a fraction outside (0, 1], or
            arguments train.py rejects (with train.py's message).
    """
    _check_choices("task", tasks_, tasks.TASKS)
    _check_choices("difficulty", difficulties, tasks.DIFFICULTIES)
    _check_choices("size", sizes, list(SIZES))
    reserved = [flag for flag in RESERVED_FLAGS if _flag_present(extra_args, flag)]
    if reserved:
        raise ValueError(f"--extra-args must not set {', '.join(reserved)}: the sweep sets them per run "
                         f"(use --tasks, --difficulties, --sizes, --seeds, --logdir)")
    if fraction is not None and not 0 < fraction <= 1:
        raise ValueError(f"--fraction must be in (0, 1] (the share of each run's step budget to run), got {fraction}")
    trials: list[TrainTrial] = []
    for task in tasks_:
        for difficulty in difficulties:
            for size in sizes:
                for seed in seeds:
                    argv: tuple[str, ...] = ("--task", task, "--difficulty", difficulty, "--size", size,
                                             "--seed", str(seed), *extra_args)
                    args = train_args(argv)
                    expected = (task, difficulty, size, seed, f"{task}-{difficulty}-{size}-s{seed}", False,
                                args.max_steps)
                    if (args.task, args.difficulty, args.size, args.seed, args.name, args.resume,
                            args.stop_at_step) != expected:
                        # an abbreviated flag (argparse accepts --se for --seed) slipped past the check above
                        raise ValueError(f"--extra-args {' '.join(extra_args)} override a flag the sweep sets "
                                         f"({', '.join(RESERVED_FLAGS)})")
                    stop = args.max_steps
                    if fraction is not None:  # in (0, 1], so 1 <= stop <= max_steps, as train.py requires
                        stop = max(1, round(fraction * args.max_steps))
                        argv = (*argv, "--stop-at-step", str(stop))
                    trials.append(TrainTrial(args.name, argv, logdir=Path(logdir), tags={
                        "task": task, "difficulty": difficulty, "size": size, "seed": seed,
                        "max_steps": args.max_steps, "stop_at_step": stop}, cpus=cpus, gpus=gpus))
    return trials


def _check_choices(kind: str, given: Sequence[str], valid: Sequence[str]) -> None:
    unknown = [name for name in given if name not in valid]
    if unknown:
        raise ValueError(f"unknown {kind}(s) {', '.join(map(repr, unknown))}; valid: {', '.join(valid)}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The sweep's command line; ``--extra-args`` takes everything after it, for train.py. The planned trials are
    ``args.trials``."""
    parser = argparse.ArgumentParser(
        description="Run train.py over tasks x difficulties x sizes x seeds on Ray Tune (or submitit); skip finished "
                    "runs, resume others.",
        epilog="Then: python -m study.record.report LOGDIR. A training function of your own: capgeo sweep "
               "MODULE:FUNCTION --grid KEY=V1,V2. Clusters: docs/sweeps.md",
    )
    parser.add_argument("--tasks", nargs="+", required=True, metavar="TASK", help=f"of: {', '.join(tasks.TASKS)}")
    parser.add_argument("--difficulties", nargs="+", default=["hard"], metavar="DIFFICULTY",
                        help=f"of: {', '.join(tasks.DIFFICULTIES)} (default: hard)")
    parser.add_argument("--sizes", nargs="+", default=[next(iter(SIZES))], metavar="SIZE",
                        help=f"of: {', '.join(SIZES)} (default: {next(iter(SIZES))})")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], metavar="SEED", help="seeds (default: 0)")
    parser.add_argument("--fraction", type=float, default=None,
                        help="run this share of each run's step budget, on the whole budget's schedule "
                             "(train.py --stop-at-step); a larger share later resumes the same runs")
    add_engine_arguments(parser)
    parser.add_argument("--stop-when-learned", action="store_true",
                        help="end each run 8 evaluations after val/acc has held 0.9 (passed to train.py; such a run "
                             "counts as finished)")
    parser.add_argument("--capability-stopper", action="store_true",
                        help="end runs whose capability will not arrive within the budget (CapabilityStopper with its "
                             "defaults, docs/sweeps.md); a run it stopped counts as finished")
    parser.add_argument("--extra-args", nargs=argparse.REMAINDER, default=[],
                        help="everything after it goes to train.py (e.g. --extra-args --measures all --eval-points 64)")
    args = parser.parse_args(argv)
    check_engine_arguments(parser, args)
    if args.stop_when_learned and "--stop-when-learned" not in args.extra_args:
        args.extra_args = [*args.extra_args, "--stop-when-learned"]
    try:
        args.trials = plan_runs(args.tasks, args.difficulties, args.sizes, args.seeds, args.logdir,
                                fraction=args.fraction, extra_args=args.extra_args, cpus=args.threads, gpus=args.gpus)
    except ValueError as err:
        parser.error(str(err))
    return args


def steps(trial: TrialLike) -> str:
    """What a dry run says of a run's budget."""
    return f"steps {trial.tags['stop_at_step']} of {trial.tags['max_steps']}; "


def main(argv: Sequence[str] | None = None) -> list[Outcome]:
    """Run the sweep; returns one outcome per run (finished runs have action ``skipped``); exits 1 if any failed."""
    args = parse_args(argv)
    return run(args.trials, args, callbacks=capability_stopper if args.capability_stopper else no_callbacks,
               name="sweep", detail=steps)


if __name__ == "__main__":
    from sweep import main as run_sweep  # as the module ``sweep``: the engines pickle its trials by reference

    try:
        run_sweep()
    except KeyboardInterrupt:
        sys.exit(130)
