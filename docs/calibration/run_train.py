"""Run ``train.py`` (its ``main``) with the given arguments and append a record to train_runs.jsonl.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python docs/calibration/run_train.py --task sort --difficulty hard \
        --seed 0 --measures rankme --stop-after-acquisition --no-progress --logdir /tmp/calib --name sort-hard-s0
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path

# CAPGEO_ROOT: run against another copy of the code (a snapshot of the committed tree, with tasks/ synced),
# so that edits in progress elsewhere in the working tree cannot break a run.
ROOT = Path(os.environ.get("CAPGEO_ROOT", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(ROOT))

import train  # noqa: E402
from tasks.params import resolve_params  # noqa: E402

LOG = Path(__file__).with_name("train_runs.jsonl")

if __name__ == "__main__":
    argv = sys.argv[1:]
    load_start = os.getloadavg()[0]
    summary = train.main(argv)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    series = summary.get("series", {})
    acc = series.get("acc", {})
    values = acc.get("values", acc) if isinstance(acc, dict) else acc
    steps = summary.get("steps") or summary.get("stop_at_step")
    final = values[-1] if isinstance(values, list) and values else None
    if isinstance(final, list | tuple):
        final = final[-1]
    rec = {
        "tool": "train.py", "argv": " ".join(argv), "task": summary["task"], "difficulty": summary["difficulty"],
        "params": resolve_params(summary["task"], summary["difficulty"]), "seed": summary["seed"],
        "size": summary["size"], "max_steps": summary["max_steps"], "batch_size": summary["batch_size"],
        "lr": summary["lr"], "acquisition_step": summary.get("acquisition_step"), "steps_run": steps,
        "final_acc": final, "wall_seconds": round(summary["wall_seconds"], 1),
        "s_per_step": round(summary["wall_seconds"] / max(1, steps or 1), 4),
        "cpu_seconds_process": round(usage.ru_utime + usage.ru_stime, 1),
        "load_avg_start_end": [round(load_start, 2), round(os.getloadavg()[0], 2)], "verdict": summary.get("verdict"),
        "run_dir": summary["run_dir"],
    }
    with LOG.open("a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps(rec))
