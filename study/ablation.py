"""Warm-up ablation: does the early RankMe collapse follow the learning-rate schedule?

    python -m study.ablation run --workers 2        # runs/ablation/<schedule>/<task>-s<seed>/
    python -m study.ablation table                  # trough step and depth per layer, against the schedule

Five schedules (linear warm-up of 0, 50, 100 or 300 steps then cosine, and a constant rate from step 0) on
three hard tasks x seeds 0-2, RankMe only, to step 600 of a 2,400-step budget; and ``sort`` seed 0 under each
schedule to the end (until 0.9 has held), to see whether acquisition moves too.
"""

from __future__ import annotations

from study.runner import ROOT, Job

LOGDIR = ROOT / "runs" / "ablation"
TASKS = ("sort", "copy", "mul")
SEEDS = (0, 1, 2)
MAX_STEPS = 2400
STOP = 600
SCHEDULES: dict[str, tuple[str, ...]] = {
    "warmup0": ("--warmup-steps", "0"),
    "warmup50": ("--warmup-steps", "50"),
    "warmup100": ("--warmup-steps", "100"),
    "warmup300": ("--warmup-steps", "300"),
    "constant": ("--warmup-steps", "0", "--lr-schedule", "constant"),
}
FULL_TASK = "sort"


def ablation_jobs() -> list[Job]:
    """Seed-major: every schedule and task of seed 0 first; the runs to acquisition last."""
    jobs = []
    for seed in SEEDS:
        for task in TASKS:
            for schedule, flags in SCHEDULES.items():
                argv = ("--task", task, "--difficulty", "hard", "--seed", str(seed), "--max-steps", str(MAX_STEPS),
                        "--stop-at-step", str(STOP), "--measures", "rankme", *flags)
                jobs.append(Job(f"{task}-s{seed}", argv, LOGDIR / schedule, {"schedule": schedule}))
    for schedule, flags in SCHEDULES.items():
        argv = ("--task", FULL_TASK, "--difficulty", "hard", "--seed", "0", "--max-steps", str(MAX_STEPS),
                "--measures", "rankme", "--stop-when-learned", *flags)
        jobs.append(Job(f"{FULL_TASK}-s0-full", argv, LOGDIR / schedule, {"schedule": schedule, "full": True}))
    return jobs


def main(argv: list[str] | None = None) -> None:
    import argparse
    import os

    from study.runner import run_jobs

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the ablation (resumable)")
    run.add_argument("--workers", type=int, default=2)
    run.add_argument("--nice", type=int, default=5)
    args = parser.parse_args(argv)
    if args.command == "run":
        os.nice(args.nice)
        run_jobs(ablation_jobs(), workers=args.workers)


if __name__ == "__main__":
    main()
