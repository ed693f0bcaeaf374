"""Overhead of the default callbacks on train.py's default run: ``--measures default`` vs ``none``.

    OMP_NUM_THREADS=1 python benchmarks/overhead.py --task sort --difficulty hard --fraction 0.05 --repeats 3

Runs the first ``fraction`` of the default run (``train.py --stop-at-step``: the full run's schedule and
evaluation interval), the two settings interleaved
``repeats`` times after a short warm-up run, and prints the median time of each and their ratio
(target <= 1.05). Times are process CPU time on one thread (``--clock``; see ``benchmarks/_timing.py``),
which other processes sharing the cores move less than wall time, though still by several percent
between runs. So the script also clocks the time spent inside the capgeo callbacks themselves (every
Lightning hook they define and the forward hooks they register) in the measured runs: their direct
cost, as a fraction of the run without them, is the part of the overhead that noise cannot hide.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import math
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import capgeo_callbacks  # noqa: E402
import train  # noqa: E402
from benchmarks._timing import CLOCKS, add_timing_args, apply_timing_args, interleaved, median  # noqa: E402
from tasks.budgets import budget  # noqa: E402


class CallbackClock:
    """Adds up the time spent inside capgeo's callbacks: their Lightning hooks and their forward hooks.

    Installed by patching the callback classes (restored on exit); nested calls (a subclass hook calling
    its parent's) are counted once.
    """

    def __init__(self, clock: str) -> None:
        self.now = CLOCKS[clock]
        self.seconds = 0.0
        self._depth = 0

    def wrap(self, fn: Callable[..., object]) -> Callable[..., object]:
        @functools.wraps(fn)
        def timed(*args: object, **kwargs: object) -> object:
            if self._depth:
                return fn(*args, **kwargs)
            self._depth += 1
            started = self.now()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += self.now() - started
                self._depth -= 1

        return timed

    @contextlib.contextmanager
    def installed(self) -> Iterator[CallbackClock]:
        classes = [obj for obj in vars(capgeo_callbacks).values()
                   if inspect.isclass(obj) and issubclass(obj, pl.Callback)]
        classes = {c for cls in classes for c in cls.__mro__ if c.__module__.startswith("capgeo_callbacks")}
        saved: list[tuple[type, str, object]] = []
        for cls in classes:
            for name, attr in list(vars(cls).items()):
                if (name.startswith("on_") or name in ("setup", "teardown")) and callable(attr):
                    saved.append((cls, name, attr))
                    setattr(cls, name, self.wrap(attr))
                elif name == "_hook":  # returns the forward hook: time the hook it returns
                    saved.append((cls, name, attr))
                    setattr(cls, name, lambda obj, layer, _make=attr: self.wrap(_make(obj, layer)))
        try:
            yield self
        finally:
            for cls, name, attr in saved:
                setattr(cls, name, attr)


def run(argv: list[str], clock: CallbackClock | None = None) -> None:
    with tempfile.TemporaryDirectory() as logdir, clock.installed() if clock else contextlib.nullcontext():
        train.main([*argv, "--logdir", logdir, "--no-progress"])


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="sort")
    parser.add_argument("--difficulty", default="hard")
    parser.add_argument("--fraction", type=float, default=0.05)
    add_timing_args(parser)
    parser.add_argument("--measures", default="default", help="the measured setting (vs 'none')")
    args = parser.parse_args(argv)
    clock = apply_timing_args(args)
    steps_budget = budget(args.task, args.difficulty).max_steps
    steps = max(1, math.ceil(steps_budget * args.fraction))
    points = steps // train.validation_interval(steps_budget)
    base = ["--task", args.task, "--difficulty", args.difficulty, "--stop-at-step", str(steps)]
    run([*base, "--stop-at-step", "5", "--measures", "none"])  # warm-up (imports, allocator)
    callback_seconds: list[float] = []

    def measured_run() -> None:
        callback_clock = CallbackClock(clock)
        run([*base, "--measures", args.measures], callback_clock)
        callback_seconds.append(callback_clock.seconds)

    times = interleaved({"none": lambda: run([*base, "--measures", "none"]), args.measures: measured_run},
                        args.repeats, warmup=0, clock=clock)
    none, measured = median(times["none"]), median(times[args.measures])
    print(f"{args.task}/{args.difficulty}: {steps} steps, {points} evaluations, {args.repeats} repeats, "
          f"{args.threads} thread(s), {clock} time")
    for setting, values in times.items():
        print(f"  --measures {setting:<8} median {median(values):7.2f} s  "
              f"({', '.join(f'{v:.2f}' for v in values)})")
    inside = median(callback_seconds)
    print(f"  inside the capgeo callbacks: median {inside:.2f} s ({', '.join(f'{v:.2f}' for v in callback_seconds)})"
          f", {inside / points * 1e3:.0f} ms per evaluation")
    ratio = measured / none
    print(f"direct cost of the callbacks ((none + inside) / none): {(none + inside) / none:.3f}")
    print(f"overhead ratio ({args.measures} / none): {ratio:.3f}")
    return {"times": times, "ratio": ratio, "callback_seconds": callback_seconds,
            "direct_ratio": (none + inside) / none, "steps": steps, "evaluations": points}


if __name__ == "__main__":
    main()
