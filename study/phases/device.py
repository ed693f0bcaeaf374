"""Run study phases on a machine with many cores and a GPU, within a deadline, and pack what finished.

    CAPGEO_COMMIT=<sha> CAPGEO_TREE_CLEAN=1 python -m study.phases.device --plan calibration levels --workers 16 \
        --seconds 330 --out OUT

First a 30-step smoke run on the GPU: if it fails (or there is no GPU) every job runs on the CPU instead. Jobs then
run through the launcher on submitit's local executor (the GPU machine reaches no package registry, and Ray's wheel
is too large to carry there; ``--engine ray`` where Ray is installed): ``workers`` jobs, each running its share of
the trials in plan order, all sharing the GPU; at the deadline the jobs are ended (unfinished runs resume at the
next call). Every
finished run's summary is packed, gzipped, into ``OUT/summaries.tar`` under ``<logdir relative to runs/>/<run>``,
with ``OUT/states.json`` (each job's state) and the log tails of failed runs in ``OUT/failed.txt``.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path

from capgeo_callbacks.sweeps import ENGINES, Outcome, TrialFailed, launch, run_trial, summary_of
from study.checkout import ROOT
from study.phases import ablation, calibration, corpus
from sweep import TrainTrial as Job

PLANS = {
    "calibration": lambda: calibration.variant_jobs(),
    "calibration2": lambda: calibration.variant_jobs(calibration.ROUND_2),
    "controls-calibrated": lambda: [job for job in corpus.phase_jobs("controls")
                                    if job.tags["task"] in ("copy", "mul")],
    "ablation": lambda: ablation.ablation_jobs(),
    "levels": lambda: corpus.phase_jobs("levels"),
    "hard": lambda: corpus.phase_jobs("hard"),
    "controls": lambda: corpus.phase_jobs("controls"),
    "s": lambda: corpus.phase_jobs("s"),
}


def smoke(accelerator: str, out: Path) -> bool:
    """Whether a 30-step run with every default measure works on ``accelerator`` (run here, through the trial
    function)."""
    trial = Job(accelerator, ("--task", "sort", "--difficulty", "hard", "--max-steps", "30", "--eval-points", "5",
                              "--accelerator", accelerator, "--devices", "1"), logdir=ROOT / "runs" / "smoke")
    started = time.time()
    try:
        run_trial(trial)
        error = None
    except TrialFailed as err:
        error = str(err)
    summary = summary_of(trial)
    series = sorted((summary or {}).get("series", {}))
    print(f"smoke on {accelerator}: {error or 'ran'} in {time.time() - started:.0f} s; series {series}", flush=True)
    if error is not None:
        (out / f"smoke_{accelerator}.txt").write_text(error + "\n" + (trial.root / "run.log").read_text()[-8000:])
    return error is None and summary is not None


def pack(jobs: Sequence[Job], states: dict[str, str], out: Path) -> None:
    runs = ROOT / "runs"
    partial = out / ".summaries.tar.partial"  # renamed when whole: a call cut short still returns a whole file
    with tarfile.open(partial, "w") as archive:
        for job in jobs:
            summary = summary_of(job)
            if summary is None:
                continue
            data = gzip.compress(json.dumps(summary, separators=(",", ":")).encode())
            info = tarfile.TarInfo(str(job.logdir.relative_to(runs) / f"{job.name}.json.gz"))
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    partial.replace(out / "summaries.tar")
    (out / "states.json").write_text(json.dumps(states, indent=1))
    failed = [job for job in jobs if states.get(job.name, "").startswith("failed")]
    tails = [f"== {job.name}\n" + (job.root / "run.log").read_text()[-3000:] for job in failed[:10]]
    (out / "failed.txt").write_text("\n".join(tails))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", nargs="+", choices=list(PLANS), required=True)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--seconds", type=float, required=True, help="deadline, from now")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--engine", choices=ENGINES, default="submitit",
                        help="submitit: local processes (default); ray: a local Ray, where Ray is installed")
    parser.add_argument("--accelerator", choices=("smoke", "gpu", "cpu"), default="smoke",
                        help="'smoke': try a short GPU run first and fall back to the CPU if it fails")
    args = parser.parse_args(argv)
    deadline = time.time() + args.seconds
    args.out.mkdir(parents=True, exist_ok=True)
    accelerator = args.accelerator
    if accelerator == "smoke":
        accelerator = "gpu" if smoke("gpu", args.out) else "cpu"
    gpus = 1 / args.workers if accelerator == "gpu" else 0.0  # every run shares the one GPU
    jobs = [Job(job.name, (*job.argv, "--accelerator", accelerator, "--devices", "1"), logdir=job.logdir,
                tags=job.tags, gpus=gpus) for plan in args.plan for job in PLANS[plan]()]
    print(f"{len(jobs)} jobs on {accelerator}, {args.workers} at a time, {deadline - time.time():.0f} s left",
          flush=True)
    states: dict[str, str] = {}

    def ended(outcome: Outcome) -> None:  # what comes back if the call is cut
        states[outcome.trial.name] = outcome.action
        pack(jobs, states, args.out)

    launch(jobs, engine=args.engine, jobs=args.workers, cluster="local", seconds=deadline - 15 - time.time(),
           storage=ROOT / "runs" / ".engine", name="device", on_outcome=ended)
    pack(jobs, states, args.out)
    counts: dict[str, int] = {}
    for state in states.values():
        counts[state] = counts.get(state, 0) + 1
    print(f"states: {counts}", flush=True)


if __name__ == "__main__":
    main()
