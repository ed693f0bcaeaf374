"""Run study phases on a machine with many cores and a GPU, within a deadline, and pack what finished.

    CAPGEO_COMMIT=<sha> python -m study.device --plan calibration levels --workers 16 --seconds 330 --out OUT

First a 30-step smoke run on the GPU: if it fails (or there is no GPU) every job runs on the CPU instead. Jobs
then run ``workers`` at a time in plan order; at the deadline no job starts and running ones are killed. Every
finished run's summary is packed, gzipped, into ``OUT/summaries.tar`` under ``<logdir relative to runs/>/<run>``,
with ``OUT/states.json`` (each job's state) and the log tails of failed runs in ``OUT/failed.txt``.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path

from study import ablation, calibration, corpus
from study.runner import ROOT, Job, run_jobs, summary_of

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
    """Whether a 30-step run with every default measure works on ``accelerator``."""
    logdir = ROOT / "runs" / "smoke"
    command = [sys.executable, str(ROOT / "train.py"), "--task", "sort", "--difficulty", "hard", "--max-steps", "30",
               "--eval-points", "5", "--logdir", str(logdir), "--name", accelerator, "--no-progress",
               "--accelerator", accelerator, "--devices", "1"]
    started = time.time()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    summary = summary_of(Job(accelerator, (), logdir))
    series = sorted((summary or {}).get("series", {}))
    print(f"smoke on {accelerator}: exit {result.returncode} in {time.time() - started:.0f} s; series {series}",
          flush=True)
    if result.returncode != 0:
        (out / f"smoke_{accelerator}.txt").write_text(result.stdout[-4000:] + "\n" + result.stderr[-8000:])
    return result.returncode == 0 and summary is not None


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
    parser.add_argument("--accelerator", choices=("smoke", "gpu", "cpu"), default="smoke",
                        help="'smoke': try a short GPU run first and fall back to the CPU if it fails")
    args = parser.parse_args(argv)
    deadline = time.time() + args.seconds
    args.out.mkdir(parents=True, exist_ok=True)
    accelerator = args.accelerator
    if accelerator == "smoke":
        accelerator = "gpu" if smoke("gpu", args.out) else "cpu"
    jobs = [Job(job.name, (*job.argv, "--accelerator", accelerator, "--devices", "1"), job.logdir, job.tags)
            for plan in args.plan for job in PLANS[plan]()]
    print(f"{len(jobs)} jobs on {accelerator}, {args.workers} at a time, {deadline - time.time():.0f} s left",
          flush=True)
    states = run_jobs(jobs, workers=args.workers, deadline=deadline - 15,
                      on_finished=lambda done: pack(jobs, done, args.out))  # what comes back if the call is cut
    pack(jobs, states, args.out)
    counts: dict[str, int] = {}
    for state in states.values():
        counts[state.split(" ")[0]] = counts.get(state.split(" ")[0], 0) + 1
    print(f"states: {counts}", flush=True)


if __name__ == "__main__":
    main()
