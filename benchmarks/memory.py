"""Memory of a long run with the callbacks: RSS (and optionally tracemalloc) after every evaluation.

    python -m benchmarks.memory --measures default --evaluations 720
    python -m benchmarks.memory --measures all --evaluations 60 --tracemalloc

Runs ``train.py`` on ``mod easy`` with one evaluation per step (so a long series of evaluations is cheap),
the costly measures at small settings every 4 evaluations, and prints the mean RSS of each eighth of the
run: memory that grows with the number of evaluations shows as a rising sequence; allocator warm-up
levels off.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import tracemalloc

import lightning.pytorch as pl
import torch

import train

CHEAP_OPTIONS = {
    "grad_rank": {"every_n_evals": 4, "batch_size": 16},
    "hessian": {"every_n_evals": 4, "batch_size": 16, "k": 2, "num_iterations": 8},
    "llc": {"every_n_evals": 4, "num_chains": 2, "num_draws": 5, "batch_size": 16, "num_batches": 1},
}


def rss_mib() -> float:
    """Resident set size of this process (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096 / 2**20


class MemoryProbe(pl.Callback):
    """Record RSS (and tracemalloc's current size) after each validation."""

    def __init__(self, trace: bool) -> None:
        self.trace = trace
        self.rss: list[float] = []
        self.traced: list[float] = []

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.rss.append(rss_mib())
        if self.trace:
            self.traced.append(tracemalloc.get_traced_memory()[0] / 2**20)


def eighths(values: list[float]) -> list[float]:
    """Means of the eight consecutive parts of ``values``."""
    size = max(1, len(values) // 8)
    return [statistics.mean(values[i : i + size]) for i in range(0, size * 8, size) if values[i : i + size]]


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--measures", default="default")
    parser.add_argument("--evaluations", type=int, default=240)
    parser.add_argument("--tracemalloc", action="store_true", help="also track Python allocations (slower)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    train.MEASURE_OPTIONS.update(CHEAP_OPTIONS)
    probe = MemoryProbe(args.tracemalloc)
    if args.tracemalloc:
        tracemalloc.start()
    with tempfile.TemporaryDirectory() as logdir:
        train.main(["--task", "mod", "--difficulty", "easy", "--no-progress", "--max-steps", str(args.evaluations),
                    "--eval-points", str(args.evaluations), "--measures", args.measures, "--logdir", logdir],
                   callbacks=[probe])
    print(f"--measures {args.measures}, {len(probe.rss)} evaluations")
    print("RSS MiB by eighth of the run: " + ", ".join(f"{v:.1f}" for v in eighths(probe.rss)))
    if probe.traced:
        print("tracemalloc MiB by eighth: " + ", ".join(f"{v:.2f}" for v in eighths(probe.traced)))
    return {"rss": probe.rss, "traced": probe.traced}


if __name__ == "__main__":
    main()
