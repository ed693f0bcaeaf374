"""``python -m examples.new_tasks FAMILY --seed N [--control] [--root DIR]``: one run (examples/new_tasks/run.py)."""

from __future__ import annotations

import argparse

from examples.new_tasks.run import run
from examples.new_tasks.tasks import FAMILIES

parser = argparse.ArgumentParser(prog="python -m examples.new_tasks", description=__doc__)
parser.add_argument("family", choices=sorted(FAMILIES))
parser.add_argument("--seed", type=int, required=True)
parser.add_argument("--control", action="store_true", help="answers shuffled across examples (nothing to learn)")
parser.add_argument("--root", default="runs/new_tasks")
arguments = parser.parse_args()
print(run(arguments.family, arguments.seed, arguments.control, arguments.root) / "capgeo_summary.json")
