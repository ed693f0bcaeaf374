"""``python -m examples.grokking --operation add --fraction 0.5 --weight-decay 1 --seed 0 [--control]
[--commutator]``."""

from __future__ import annotations

import argparse

from examples.grokking.grokking import OPERATIONS, Settings, train

parser = argparse.ArgumentParser(prog="python -m examples.grokking", description=__doc__)
parser.add_argument("--operation", choices=sorted(OPERATIONS), default="add")
parser.add_argument("--fraction", type=float, default=Settings.fraction)
parser.add_argument("--weight-decay", type=float, default=Settings.weight_decay)
parser.add_argument("--max-steps", type=int, default=Settings.max_steps)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--control", action="store_true")
parser.add_argument("--commutator", action="store_true", help="also measure the commutator defect")
parser.add_argument("--trial-dir", default=None)
args = parser.parse_args()
train({"operation": args.operation, "fraction": args.fraction, "weight_decay": args.weight_decay,
       "max_steps": args.max_steps, "seed": args.seed, "control": args.control, "commutator": args.commutator,
       "trial_dir": args.trial_dir})
