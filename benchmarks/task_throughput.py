"""Task generation throughput vs what training consumes, per task and difficulty.

    OMP_NUM_THREADS=1 python -m benchmarks.task_throughput --repeats 3 --threads 1

For each task at each difficulty, with train.py's default batch size for it (64), times, interleaved
and ``repeats`` times each after a warm-up:

- ``generate``: ``--batches`` training batches drawn from the datamodule's training DataLoader (the
  vectorised generator, the train-split filter and the DataLoader, as training sees them);
- ``train``: ``--steps`` training steps of the smallest capgeo model (``xs``) on one such batch
  (forward, answer-masked loss, backward, AdamW step; no Lightning, so the fastest consumer).

and prints both as examples per second and their ratio generate / train (how many times faster the
data arrive than training uses them; the target is far above 1).
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Sequence
from typing import Any

import torch

import tasks
from benchmarks._timing import add_timing_args, apply_timing_args, interleaved, median
from models import build_model
from models.lightning_module import answer_loss
from tasks.budgets import budget


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(tasks.TASKS), choices=tasks.TASKS)
    parser.add_argument("--difficulties", nargs="+", default=list(tasks.DIFFICULTIES), choices=tasks.DIFFICULTIES)
    parser.add_argument("--size", default="xs")
    parser.add_argument("--batches", type=int, default=20, help="batches generated per timing")
    parser.add_argument("--steps", type=int, default=4, help="training steps per timing")
    add_timing_args(parser)
    args = parser.parse_args(argv)
    clock = apply_timing_args(args)

    print(f"examples/s: generation (training DataLoader) vs {args.size} training steps; {args.threads} thread(s), "
          f"{args.repeats} repeats, medians of {clock} time")
    print(f"{'task':<9}{'level':<8}{'T':>4}{'batch':>6}{'generate/s':>12}{'train/s':>10}{'ratio':>9}")
    results = []
    for difficulty, task in itertools.product(args.difficulties, args.tasks):
        batch_size = budget(task, difficulty).batch_size
        torch.manual_seed(0)
        datamodule = tasks.make_datamodule(task, difficulty, seed=0, batch_size=batch_size)
        model = build_model(args.size, datamodule.vocab_size, datamodule.seq_len).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        batch = datamodule.train_batch(0)
        stream = iter(datamodule.train_dataloader())

        def generate(stream: Any = stream) -> None:
            for _ in range(args.batches):
                next(stream)

        def steps(model: torch.nn.Module = model, optimizer: torch.optim.Optimizer = optimizer,
                  batch: dict = batch) -> None:
            for _ in range(args.steps):
                loss = answer_loss(model(batch["input_ids"]), batch["targets"], batch["answer_mask"])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

        times = interleaved({"generate": generate, "train": steps}, args.repeats, clock=clock)
        generated = args.batches * batch_size / median(times["generate"])
        consumed = args.steps * batch_size / median(times["train"])
        ratio = generated / consumed
        print(f"{task:<9}{difficulty:<8}{datamodule.seq_len:>4}{batch_size:>6}{generated:>12,.0f}{consumed:>10,.0f}"
              f"{ratio:>8.0f}x")
        results.append({"task": task, "difficulty": difficulty, "seq_len": datamodule.seq_len,
                        "batch_size": batch_size, "generate_per_s": generated, "train_per_s": consumed,
                        "ratio": ratio})
    worst = min(results, key=lambda r: r["ratio"])
    print(f"lowest ratio: {worst['ratio']:.0f}x ({worst['task']}/{worst['difficulty']}); "
          f"median {median([r['ratio'] for r in results]):.0f}x")
    return results


if __name__ == "__main__":
    main()
