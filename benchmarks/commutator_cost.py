"""The cost of one commutator defect measurement, beside a training step's and RankMe's and ILDR's.

    OMP_NUM_THREADS=1 python -m benchmarks.commutator_cost --repeats 5 --threads 1

On capgeo's transformer of each ``--sizes`` (trained ``--train-steps`` AdamW steps on ``--task``/``--difficulty``, then
in eval mode), for each ``--batch-sizes`` B (the fixed batch; ``CommutatorDefectMonitor``'s default is 64, its halves
one pair), times, interleaved, ``repeats`` times each after a warm-up:

- ``step``: one training step's forward and backward on the B examples (the unit the ratios are in);
- ``defect``: the defect in its small-step form on the two halves (what the monitor measures by default);
- ``finite``: the finite-step form at eta = 1e-3, in float64 (the monitor's ``step_size`` option);
- ``rankme`` and ``ildr``: RankMe and ILDR of 512 rows of the model's width (what ``train.py``'s RankMe monitor takes
  at every evaluation of every watched layer), on Gaussian classes of the task's answer count.

It prints the medians and the ratios to a training step. The defect costs two gradients with their graphs and one
backward through both; how that compares with RankMe depends on the model and B, which is what this measures.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

import tasks
from benchmarks._timing import add_timing_args, apply_timing_args, interleaved, median
from benchmarks._training import pretrain
from benchmarks.ildr_speed import classed_rows
from capgeo_callbacks.capture.batches import answer_cross_entropy, batch_size_of, default_forward, slice_batch
from capgeo_callbacks.measures.commutator import commutator_defect
from capgeo_callbacks.measures.hessian import math_sdpa
from capgeo_callbacks.measures.ildr import ildr
from capgeo_callbacks.measures.rankme import rankme
from models import build_model

ROWS = 512  # RankMe's rows per layer in train.py


def timed(model: nn.Module, batch: Any, rows: Tensor, targets: Tensor, repeats: int, clock: str) -> dict[str, float]:
    """Median seconds of a training step's forward and backward on ``batch``, the defect on its halves in both forms,
    and RankMe and ILDR of ``rows``, interleaved."""
    half = batch_size_of(batch) // 2
    a, b = slice_batch(batch, 0, half), slice_batch(batch, half, 2 * half)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        answer_cross_entropy(default_forward(model, batch), batch).backward()

    def defect(step_size: float | None = None) -> float:
        with math_sdpa():
            return commutator_defect(model, answer_cross_entropy, a, b, forward=default_forward, step_size=step_size)

    times = interleaved({"step": step, "defect": defect, "finite": lambda: defect(1e-3),
                         "rankme": lambda: rankme(rows), "ildr": lambda: ildr(rows, targets)}, repeats, clock=clock)
    model.zero_grad(set_to_none=True)
    return {**{f"{name}_s": median(values) for name, values in times.items()}, "defect": defect(),
            "finite": defect(1e-3)}


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["xs", "s"], help="capgeo model sizes")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[64, 128], help="examples in the fixed batch")
    parser.add_argument("--task", default="mod")
    parser.add_argument("--difficulty", default="hard")
    parser.add_argument("--train-steps", type=int, default=100, help="AdamW steps before timing")
    parser.add_argument("--classes", type=int, default=97, help="classes of the rows RankMe and ILDR are timed on")
    add_timing_args(parser, repeats=5)
    args = parser.parse_args(argv)
    clock = apply_timing_args(args)

    results: list[dict[str, Any]] = []
    print(f"commutator defect vs a training step, RankMe and ILDR ({ROWS} rows); {args.repeats} repeats, "
          f"{args.threads} thread(s); times are medians in {clock} ms, ratios to one training step")
    print(f"{'size':>4} {'B':>5} {'step':>8} {'defect':>8} {'finite':>8} {'rankme':>8} {'ildr':>8} "
          f"{'defect/step':>11} {'finite/step':>11} {'defect/rankme':>13}")
    for size in args.sizes:
        datamodule = tasks.make_datamodule(args.task, args.difficulty, seed=0, batch_size=max(args.batch_sizes))
        model = build_model(size, datamodule.vocab_size, datamodule.seq_len)
        pretrain(model, datamodule, args.train_steps)  # ends in eval mode
        rows, targets = classed_rows(ROWS, model.cfg.d_model, args.classes)
        for batch_size in args.batch_sizes:
            batch = slice_batch(datamodule.train_batch(args.train_steps), 0, batch_size)
            t = timed(model, batch, rows, targets, args.repeats, clock)
            row = {"size": size, "batch_size": batch_size, **t, "defect_per_step": t["defect_s"] / t["step_s"],
                   "finite_per_step": t["finite_s"] / t["step_s"], "defect_per_rankme": t["defect_s"] / t["rankme_s"]}
            results.append(row)
            print(f"{size:>4} {batch_size:>5} " + " ".join(f"{t[f'{name}_s'] * 1e3:8.1f}" for name in
                                                           ("step", "defect", "finite", "rankme", "ildr"))
                  + f" {row['defect_per_step']:11.2f} {row['finite_per_step']:11.2f} {row['defect_per_rankme']:13.2f}")
    return results


if __name__ == "__main__":
    main()
