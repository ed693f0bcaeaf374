"""Pilot runs: each family at its pilot seeds (never reported as results), and the table PILOTS.md shows.

``python -m examples.new_tasks.pilots run recall 1000 1001 1002`` runs what is not yet finished, one at a time,
into ``runs/new_tasks_pilots/<settings>/`` (the family's settings in run.py); ``python -m examples.new_tasks.pilots
table`` prints one row per finished run. Late, as
in docs/design.md ("Labels"): the acquisition step is at least 4 warm-ups and at least 25% of the budget.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from capgeo_callbacks import SUMMARY_FILENAME, read_summary
from examples.new_tasks.run import SETTINGS, run, run_name

ROOT = Path("runs/new_tasks_pilots")
LATE_WARMUPS, LATE_FRACTION = 4, 0.25


def finished(folder: Path) -> bool:
    record = folder / "run.json"
    if not record.exists() or not (folder / SUMMARY_FILENAME).exists():
        return False
    info = json.loads(record.read_text())
    return info["parts"][-1]["steps"] >= info["settings"]["max_steps"]


def row(folder: Path) -> dict[str, Any]:
    info = json.loads((folder / "run.json").read_text())
    summary = read_summary(folder / SUMMARY_FILENAME)
    settings, acquired = info["settings"], summary["acquisition_step"]
    late = (acquired is not None and acquired >= LATE_WARMUPS * settings["warmup"]
            and acquired >= LATE_FRACTION * settings["max_steps"])
    acc = summary["series"]["acc"]
    return {"family": info["family"], "seed": info["seed"], "control": info["control"],
            "acquisition": acquired, "holds 0.9": summary["labels"]["holds"].get("0.9"), "late": late,
            "final acc": round(acc[-1][1], 3), "max acc": round(max(v for _, v in acc), 3),
            "budget": settings["max_steps"], "warm-up": settings["warmup"], "lr": settings["lr"],
            "dim x layers": f"{settings['dim']}x{settings['layers']}",
            "schedule": "cosine" if settings.get("cosine") else "constant", "cpu s": info["cpu_seconds"],
            "parts": len(info["parts"])}


def table(root: Path = ROOT) -> str:
    rows = sorted((row(folder) for folder in root.glob("*/*") if finished(folder)),
                  key=lambda r: (r["family"], r["budget"], r["control"], r["seed"]))
    if not rows:
        return "no finished pilot runs"
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    lines += ["| " + " | ".join("-" if r[k] is None else str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m examples.new_tasks.pilots", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    runs = commands.add_parser("run")
    runs.add_argument("family", choices=sorted(SETTINGS))
    runs.add_argument("seeds", type=int, nargs="+")
    runs.add_argument("--control", action="store_true")
    commands.add_parser("table")
    arguments = parser.parse_args()
    if arguments.command == "run":
        for seed in arguments.seeds:
            settings = SETTINGS[arguments.family]
            folder = ROOT / settings.tag / run_name(arguments.family, seed, arguments.control)
            if not finished(folder):
                run(arguments.family, seed, arguments.control, folder.parent, settings)
            print(row(folder), flush=True)
    else:
        print(table())
