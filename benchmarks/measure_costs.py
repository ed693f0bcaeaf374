"""Cost of each measure per evaluation, relative to one training step of the same model and task.

    python benchmarks/measure_costs.py --task mod --difficulty easy

The gradient-based monitors are timed through their own ``measure`` (inside ``measuring_context``, as
they run in training) on their fixed batch; RankMe and probes by their computation on the captured rows
of every watched layer (their hooks ride on the validation pass, which runs with or without them).
Medians of ``--repeats`` runs (one for LLC).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tasks  # noqa: E402
from capgeo_callbacks import GradientRankMonitor, HessianMonitor, LLCMonitor, linear_probe_accuracy, rankme  # noqa: E402
from capgeo_callbacks.callbacks.gradient_rank_monitor import measuring_context  # noqa: E402
from models import CapabilityModule  # noqa: E402
from models.lightning_module import answer_loss  # noqa: E402


def median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="mod")
    parser.add_argument("--difficulty", default="easy")
    parser.add_argument("--size", default="xs")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    dm = tasks.make_datamodule(args.task, args.difficulty, batch_size=args.batch_size, val_size=2048)
    module = CapabilityModule(size=args.size, vocab_size=dm.vocab_size, max_seq_len=dm.seq_len)
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3)
    batch = dm.train_batch(0)

    def train_step() -> None:
        loss = answer_loss(module(batch["input_ids"]), batch["targets"], batch["answer_mask"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    train_step()
    step_time = median_time(train_step, max(10, args.repeats))
    fixed = {k: torch.cat([dm.train_batch(i)[k] for i in range(1, 3)])[:128] for k in batch}
    costs: dict[str, float] = {}
    for name, monitor in [("grad_rank (B=128)", GradientRankMonitor()), ("hessian (k=3)", HessianMonitor()),
                          ("llc (4 chains x 200 draws)", LLCMonitor(batch_size=128, num_batches=1))]:
        def run(monitor: object = monitor) -> None:
            with measuring_context(module):
                monitor.measure(module, fixed, 0)

        costs[name] = median_time(run, 1 if "llc" in name else args.repeats)

    # RankMe and probes: the rows of every watched layer (2 blocks + final norm) at answer positions
    captured: list[torch.Tensor] = []
    hooks = [m.register_forward_hook(lambda m, a, o: captured.append(o.detach()))
             for m in (*module.model.blocks, module.model.norm_f)]
    val = dm.eval_batch("val")
    with torch.no_grad():
        module(val["input_ids"][:2048])
    for h in hooks:
        h.remove()
    mask = val["answer_mask"][:2048]
    rows = [h[mask][:2048].float() for h in captured]
    labels = val["targets"][:2048][mask][:2048]
    half = len(labels) // 2
    costs["rankme (3 layers)"] = median_time(lambda: [rankme(r) for r in rows], args.repeats)
    costs["probes (3 layers)"] = median_time(
        lambda: [linear_probe_accuracy(r[:half], labels[:half], r[half:], labels[half:]) for r in rows],
        args.repeats)
    print(f"{args.task}/{args.difficulty}, size {args.size}: one training step (batch {args.batch_size}) "
          f"{step_time * 1000:.1f} ms; RankMe/probe rows per layer: {rows[0].shape[0]}")
    print("| measure | time per evaluation (ms) | training steps |")
    print("| --- | --- | --- |")
    for name, cost in costs.items():
        print(f"| {name} | {cost * 1000:.1f} | {cost / step_time:.1f} |")


if __name__ == "__main__":
    main()
