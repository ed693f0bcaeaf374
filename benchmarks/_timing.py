"""Interleaved timing shared by the benchmarks: every ratio is measured in one run on one machine.

The machine may be shared, so each candidate is timed in turn within every repeat (the order
alternating between repeats, so a slow drift of the machine's load hits both sides alike) and the
medians of the repeats are compared.

Clocks: ``cpu`` is the process's CPU time (``time.process_time``: user + system time of all its
threads), ``wall`` the elapsed time (``time.perf_counter``). With one thread, CPU time is the work
done and barely moves when other processes compete for the cores, whereas wall time then includes
waiting for a core; with several threads CPU time adds theirs up, so use ``wall`` for those.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Mapping

import torch

CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}


def default_clock(threads: int) -> str:
    """``cpu`` for one thread (robust on a shared machine), ``wall`` otherwise."""
    return "cpu" if threads == 1 else "wall"


def add_timing_args(parser: argparse.ArgumentParser, repeats: int = 3) -> None:
    """``--repeats``, ``--threads`` (default 1) and ``--clock``, the same in every benchmark."""
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=list(CLOCKS), default=None,
                        help="cpu (process CPU time) or wall; default cpu for one thread, else wall")


def apply_timing_args(args: argparse.Namespace) -> str:
    """Pin torch to ``args.threads`` and return the clock to time with."""
    torch.set_num_threads(args.threads)
    return args.clock or default_clock(args.threads)


def interleaved(
    candidates: Mapping[str, Callable[[], object]], repeats: int, warmup: int = 1, clock: str = "wall"
) -> dict[str, list[float]]:
    """Times (s) of each candidate over ``repeats`` rounds, each round running every candidate once.

    ``warmup`` untimed rounds come first (allocator, lazy initialisation, caches); ``clock`` is a key
    of :data:`CLOCKS`.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    now = CLOCKS[clock]
    names = list(candidates)
    for _ in range(warmup):
        for name in names:
            candidates[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(repeats):
        for name in names if round_index % 2 == 0 else reversed(names):
            started = now()
            candidates[name]()
            times[name].append(now() - started)
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


def fmt_times(values: list[float], unit: float = 1e3) -> str:
    """``median  (every value)``, in milliseconds by default."""
    return f"{median(values) * unit:9.2f}  ({', '.join(f'{v * unit:.1f}' for v in values)})"
