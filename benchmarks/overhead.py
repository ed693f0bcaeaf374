"""Overhead of the default callbacks on train.py's default runs: ``--measures default`` vs ``none``.

    python -m benchmarks.overhead --all --fraction 0.2 --repeats 1          # every task and level
    python -m benchmarks.overhead --task copy --difficulty easy --repeats 3

For each level, the first ``fraction`` of its default run (``train.py --stop-at-step``: the whole run's
schedule, so the dense early evaluations are all in it and the ratio is, if anything, pessimistic) is run
with the default measures and with none, interleaved ``repeats`` times, on one thread, and the ratio of the
medians is printed (target <= 1.03). Times are process CPU time on one thread (``--clock``; see
``benchmarks/_timing.py``), which other processes sharing the cores move less than wall time. The same
measured runs also clock where the callbacks' time goes, per component, as milliseconds per evaluation:
each capgeo callback's Lightning hooks and forward hooks, the live figures, and what goes to the loggers
(time inside a nested component counts for that component only).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import math
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import lightning.pytorch as pl

import capgeo_callbacks
import train
from benchmarks._timing import CLOCKS, add_timing_args, apply_timing_args, interleaved, median
from capgeo_callbacks.callbacks import base
from capgeo_callbacks.capture import hooks as capture
from capgeo_callbacks.publish import loggers
from capgeo_callbacks.run.schedule import evaluation_steps
from capgeo_callbacks.run.session import RunSession
from tasks import DIFFICULTIES, TASKS
from tasks.budgets import budget

COMPONENTS = ("RankMeMonitor", "LinearProbeMonitor", "PrecursorDetector", "figures", "logging")


class ComponentClock:
    """Exclusive time per component: a call's time minus the time of the components it calls."""

    def __init__(self, clock: str | Callable[[], float]) -> None:
        self.now = CLOCKS[clock] if isinstance(clock, str) else clock
        self.seconds: dict[str, float] = defaultdict(float)
        self._stack: list[list[float]] = []  # per open call: [start, time of nested components]

    def wrap(self, component: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._stack.append([self.now(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                started, nested = self._stack.pop()
                elapsed = self.now() - started
                self.seconds[component] += elapsed - nested
                if self._stack:
                    self._stack[-1][1] += elapsed

        return timed

    @contextlib.contextmanager
    def installed(self) -> Iterator[ComponentClock]:
        saved: list[tuple[Any, str, Any, bool]] = []

        def patch(owner: Any, name: str, component: str) -> None:
            saved.append((owner, name, getattr(owner, name), name in vars(owner)))
            setattr(owner, name, self.wrap(component, getattr(owner, name)))

        # not EvaluationSchedule: its step-0 validation is the validation itself, in both settings
        callbacks = [obj for obj in vars(capgeo_callbacks).values() if inspect.isclass(obj)
                     and issubclass(obj, pl.Callback)
                     and obj.__name__ not in ("MeasureCallback", "EvaluationSchedule", "StepProgressBar")]
        for cls in callbacks:  # each class's hooks, inherited ones included, under its own name
            for name in dir(cls):
                defined = next((o for o in cls.__mro__ if name in vars(o)), None)
                if (name.startswith("on_") or name in ("setup", "teardown")) and defined is not None and \
                        defined.__module__.startswith("capgeo_callbacks"):
                    patch(cls, name, cls.__name__)
        # the forward hooks (row capture), the figures and the loggers, wherever they are called from
        patch(capture.HiddenStateCapture, "add", "capture (forward hooks)")
        patch(RunSession, "publish_figures", "figures")
        for name in ("publish_text", "publish_image", "publish_alert", "publish_hparams"):
            patch(loggers, name, "logging")
        patch(base.MeasureCallback, "record", "logging")
        try:
            yield self
        finally:
            for owner, name, attr, own in reversed(saved):
                if own:
                    setattr(owner, name, attr)
                else:
                    delattr(owner, name)


def run(argv: list[str], clock: ComponentClock | None = None) -> None:
    with tempfile.TemporaryDirectory() as logdir, clock.installed() if clock else contextlib.nullcontext():
        train.main([*argv, "--logdir", logdir, "--no-progress"])


def measure_level(task: str, difficulty: str, fraction: float, repeats: int, clock: str,
                  measures: str = "default") -> dict[str, Any]:
    """The overhead ratio and per-component ms per evaluation of one level's first ``fraction``."""
    steps_budget = budget(task, difficulty).max_steps
    steps = max(1, math.ceil(steps_budget * fraction))
    evaluations = sum(1 for step in evaluation_steps(steps_budget, train.EVALUATION_POINTS) if step <= steps)
    base_args = ["--task", task, "--difficulty", difficulty, "--stop-at-step", str(steps)]
    components: list[dict[str, float]] = []

    def measured_run() -> None:
        component_clock = ComponentClock(clock)
        run([*base_args, "--measures", measures], component_clock)
        components.append(dict(component_clock.seconds))

    times = interleaved({"none": lambda: run([*base_args, "--measures", "none"]), measures: measured_run},
                        repeats, warmup=0, clock=clock)
    names = sorted({name for found in components for name in found})
    per_eval = {name: median([found.get(name, 0.0) for found in components]) / evaluations * 1e3 for name in names}
    return {"task": task, "difficulty": difficulty, "steps": steps, "budget": steps_budget,
            "evaluations": evaluations, "none": median(times["none"]), "measured": median(times[measures]),
            "ratio": median(times[measures]) / median(times["none"]), "ms_per_evaluation": per_eval,
            "times": times}


def table(rows: Sequence[dict[str, Any]]) -> str:
    names = sorted({name for row in rows for name in row["ms_per_evaluation"]})
    lines = ["| task | level | steps (of budget) | evaluations | none (s) | default (s) | ratio | "
             + " | ".join(f"{name} (ms/eval)" for name in names) + " |",
             "|" + " --- |" * (7 + len(names))]
    for row in rows:
        cells = " | ".join(f"{row['ms_per_evaluation'].get(name, 0.0):.1f}" for name in names)
        lines.append(f"| {row['task']} | {row['difficulty']} | {row['steps']} ({row['budget']}) | "
                     f"{row['evaluations']} | {row['none']:.1f} | {row['measured']:.1f} | {row['ratio']:.3f} | "
                     f"{cells} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--all", action="store_true", help="every task and level")
    parser.add_argument("--task", default="copy", choices=TASKS)
    parser.add_argument("--difficulty", default="easy", choices=DIFFICULTIES)
    parser.add_argument("--fraction", type=float, default=0.2)
    parser.add_argument("--measures", default="default", help="the measured setting (vs 'none')")
    add_timing_args(parser, repeats=1)
    args = parser.parse_args(argv)
    clock = apply_timing_args(args)
    levels = [(t, d) for t in TASKS for d in DIFFICULTIES] if args.all else [(args.task, args.difficulty)]
    run(["--task", levels[0][0], "--difficulty", levels[0][1], "--stop-at-step", "5", "--measures", "default"])
    rows = []
    for task, difficulty in levels:  # warm-up above: imports, allocator, matplotlib
        rows.append(measure_level(task, difficulty, args.fraction, args.repeats, clock, args.measures))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(f"\n{args.repeats} repeat(s), {args.threads} thread(s), {clock} time, the first {args.fraction:g} of "
          "each default run\n")
    print(table(rows))
    ratios = [row["ratio"] for row in rows]
    print(f"\nratios: median {median(ratios):.3f}, largest {max(ratios):.3f}")
    return rows


if __name__ == "__main__":
    main()
