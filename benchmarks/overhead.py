"""Overhead of the default callbacks on train.py's default runs: ``--measures default`` vs ``none``.

    python -m benchmarks.overhead --all --repeats 3 --out benchmarks/results/overhead-after   # every task and level
    python -m benchmarks.overhead --all --repeats 3 --shard 2/2 --out ...   # the second half, on another core
    python -m benchmarks.overhead --task copy --difficulty easy --fraction 1.0 --repeats 3   # one whole run
    python -m benchmarks.overhead table benchmarks/results/overhead-after     # the markdown table of a results folder
    python -m benchmarks.overhead line benchmarks/results/overhead-after      # the same in one line, machine named
    python -m benchmarks.overhead compare BEFORE_FOLDER AFTER_FOLDER          # two folders' ratios side by side

For each level, the first ``fraction`` of its default run (``train.py --stop-at-step``: the whole run's schedule,
so the dense early evaluations are all in it and the ratio is, if anything, pessimistic) is run with the default
measures and with none, interleaved, ``repeats`` pairs fixed in advance (the order alternating from pair to pair),
on one thread. Each pair gives a ratio (default / none); a level passes when the median of its pairs' ratios is at
most 1.03. Times are process CPU time on one thread (``--clock``; see ``benchmarks/_timing.py``), which other
processes sharing the cores move less than wall time. The measured runs also clock where the callbacks' time goes,
per component, as milliseconds per evaluation: each capgeo callback's Lightning hooks and forward hooks, the
figures, and what goes to the loggers (time inside a nested component counts for that component only).

With ``--out FOLDER`` each level's pairs are written to ``FOLDER/<task>-<difficulty>.json`` as soon as they are
measured (with the commit, the machine and its load average), and a level already there is not measured again, so
an interrupted table resumes; ``table``, ``line`` and ``compare`` read those files. ``--set NAME.OPTION=VALUE``
measures another setting than the default (``rankme.every_n_evals=2``, ``detector.live_figures=false``: options
of ``train.py``'s measure callbacks and detector), recorded with the results.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import functools
import inspect
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

import capgeo_callbacks
import train
import train_cli
from benchmarks._timing import CLOCKS, add_timing_args, apply_timing_args, interleaved, median
from capgeo_callbacks.callbacks import base
from capgeo_callbacks.capture import hooks as capture
from capgeo_callbacks.publish import loggers
from capgeo_callbacks.run.schedule import evaluation_steps
from capgeo_callbacks.run.session import RunSession
from tasks import DIFFICULTIES, TASKS
from tasks.budgets import budget

TARGET = 1.03
# ComponentClock's names -> the table's columns, in the table's order
COMPONENTS = {"RankMeMonitor": "RankMe", "LinearProbeMonitor": "probes", "capture (forward hooks)": "capture",
              "PrecursorDetector": "detector, rules", "figures": "figures", "logging": "logging"}
ROOT = Path(__file__).resolve().parent.parent


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


@contextlib.contextmanager
def options_set(assignments: Sequence[str]) -> Iterator[dict[str, dict[str, Any]]]:
    """``train.py``'s measure and detector options with ``NAME.OPTION=VALUE`` assignments applied (VALUE as JSON,
    else a string) for the ``with`` block; yields what was set, by name."""
    chosen: dict[str, dict[str, Any]] = {}
    if not assignments:  # the code measured may predate the options (a "before" checkout)
        yield chosen
        return
    saved = copy.deepcopy(train.MEASURE_OPTIONS), dict(train.DETECTOR_OPTIONS)
    try:
        for assignment in assignments:
            target, _, text = assignment.partition("=")
            name, _, option = target.partition(".")
            if not option or not text:
                raise ValueError(f"--set takes NAME.OPTION=VALUE, got {assignment!r}")
            if name != "detector" and name not in train.MEASURE_OPTIONS:
                raise ValueError(f"--set {assignment!r}: {name!r} is neither 'detector' nor a measure "
                                 f"({', '.join(train.MEASURE_OPTIONS)})")
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                value = text
            (train.DETECTOR_OPTIONS if name == "detector" else train.MEASURE_OPTIONS[name])[option] = value
            chosen.setdefault(name, {})[option] = value
        yield chosen
    finally:
        train.MEASURE_OPTIONS.clear()
        train.MEASURE_OPTIONS.update(saved[0])
        train.DETECTOR_OPTIONS.clear()
        train.DETECTOR_OPTIONS.update(saved[1])


def measure_level(task: str, difficulty: str, fraction: float, repeats: int, clock: str,
                  measures: str = "default") -> dict[str, Any]:
    """The pairs (``measures`` and none, interleaved) of one level's first ``fraction``: each pair's times and
    ratio, and the measured runs' per-component seconds."""
    steps_budget = budget(task, difficulty).max_steps
    steps = max(1, math.ceil(steps_budget * fraction))
    evaluations = sum(1 for step in evaluation_steps(steps_budget, train_cli.EVALUATION_POINTS) if step <= steps)
    base_args = ["--task", task, "--difficulty", difficulty, "--stop-at-step", str(steps)]
    components: list[dict[str, float]] = []

    def measured_run() -> None:
        component_clock = ComponentClock(clock)
        run([*base_args, "--measures", measures], component_clock)
        components.append(dict(component_clock.seconds))

    load = os.getloadavg()
    times = interleaved({"none": lambda: run([*base_args, "--measures", "none"]), "measured": measured_run},
                        repeats, warmup=0, clock=clock)
    runs = zip(times["none"], times["measured"], components, strict=True)
    pairs = [{"first": "none" if i % 2 == 0 else "measured", "none": none, "measured": measured,
              "ratio": measured / none, "components": found} for i, (none, measured, found) in enumerate(runs)]
    return {"task": task, "difficulty": difficulty, "steps": steps, "budget": steps_budget,
            "evaluations": evaluations, "fraction": fraction, "measures": measures, "pairs": pairs,
            "load_average": {"start": list(load), "end": list(os.getloadavg())}}


def provenance(clock: str, threads: int, options: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What was measured and where: the code's commit and its uncommitted files, the machine, the settings."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=Path.cwd(), capture_output=True, text=True, check=True,
                                  timeout=10).stdout.rstrip("\n")
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": git("rev-parse", "HEAD").strip(),
            "uncommitted": [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()],
            "machine": machine(), "clock": clock, "threads": threads, "options": options,
            "torch": str(torch.__version__), "lightning": str(pl.__version__)}


def machine() -> dict[str, Any]:
    """The CPU's model name, its cores and the host's name."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpu": model, "cores": os.cpu_count(), "node": platform.node()}


def result_path(folder: Path, task: str, difficulty: str) -> Path:
    return folder / f"{task}-{difficulty}.json"


def read_results(folder: str | Path) -> list[dict[str, Any]]:
    """Every level measured in ``folder``, in the order of the tasks and difficulties."""
    order = {(t, d): i for i, (t, d) in enumerate((t, d) for t in TASKS for d in DIFFICULTIES)}
    rows = [json.loads(path.read_text()) for path in Path(folder).glob("*.json")]
    return sorted(rows, key=lambda row: order.get((row["task"], row["difficulty"]), len(order)))


def ratio_of(row: dict[str, Any]) -> float:
    """A level's ratio: the median of its pairs' ratios."""
    return median([pair["ratio"] for pair in row["pairs"]])


def components_per_evaluation(row: dict[str, Any]) -> dict[str, float]:
    """Milliseconds per evaluation of each component, the median over the measured runs."""
    names = {name for pair in row["pairs"] for name in pair["components"]}
    return {name: median([pair["components"].get(name, 0.0) for pair in row["pairs"]]) / row["evaluations"] * 1e3
            for name in names}


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The markdown table of measured levels: every pair's times and ratio, the median ratio, the components."""
    columns = [name for name in COMPONENTS if any(name in pair["components"] for row in rows for pair in row["pairs"])]
    repeats = max(len(row["pairs"]) for row in rows)
    head = ["task", "level", "steps (of budget)", "evaluations", "none, CPU s", "default, CPU s", "ratio of each pair",
            "median ratio", *(f"{COMPONENTS[name]} (ms/eval)" for name in columns)]
    lines = ["| " + " | ".join(head) + " |", "| --- | --- | ---: | ---: | --- | --- | --- | ---: |"
             + " ---: |" * len(columns)]
    for row in rows:
        pairs = row["pairs"]
        ratio = ratio_of(row)
        shown = f"{ratio:.3f}" if ratio <= TARGET else f"**{ratio:.3f}**"
        per_eval = components_per_evaluation(row)
        cells = [row["task"], row["difficulty"], f"{row['steps']} ({row['budget']})", str(row["evaluations"]),
                 ", ".join(f"{p['none']:.1f}" for p in pairs), ", ".join(f"{p['measured']:.1f}" for p in pairs),
                 ", ".join(f"{p['ratio']:.3f}" for p in pairs), shown,
                 *(f"{per_eval.get(name, 0.0):.1f}" for name in columns)]
        lines.append("| " + " | ".join(cells) + " |")
    if any(len(row["pairs"]) != repeats for row in rows):
        lines.append(f"\n(not every level has {repeats} pairs)")
    return "\n".join(lines)


def verdict(rows: Sequence[dict[str, Any]]) -> str:
    """How many levels pass, the median and the largest ratio."""
    ratios = [ratio_of(row) for row in rows]
    worst = max(rows, key=ratio_of)
    passed = sum(ratio <= TARGET for ratio in ratios)
    return (f"Ratio <= {TARGET} on **{passed} of {len(rows)}** levels; median {median(ratios):.3f}, largest "
            f"{max(ratios):.3f} ({worst['task']} {worst['difficulty']}).")


def describe(rows: Sequence[dict[str, Any]]) -> str:
    """Where and how the rows were measured, from what they recorded."""
    first = rows[0]["provenance"]
    commits = sorted({row["provenance"]["commit"][:7] for row in rows})
    uncommitted = sorted({path for row in rows for path in row["provenance"]["uncommitted"]})
    fractions = sorted({row["fraction"] for row in rows})
    repeats = sorted({len(row["pairs"]) for row in rows})
    options = first.get("options") or {}
    loads = [value for row in rows for value in (row["load_average"]["start"][0], row["load_average"]["end"][0])]
    dates = sorted(row["finished"][:10] for row in rows)
    what = "the whole run" if fractions == [1.0] else f"the first {', '.join(f'{f:g}' for f in fractions)} of the run"
    setting = ", ".join(f"{name}.{key}={value}" for name, chosen in options.items() for key, value in chosen.items())
    return (f"{len(rows)} level(s), {what}, {'/'.join(map(str, repeats))} interleaved pair(s) each; "
            f"`--measures {first.get('measures', 'default')}`{f' with {setting}' if setting else ''} vs "
            f"`--measures none`; {first['clock']} time, {first['threads']} thread(s). Code: "
            f"{', '.join(commits)}" + (f" (uncommitted: {', '.join(uncommitted)})" if uncommitted else "")
            + f"; machine: {machine_name(rows)}, torch {first['torch']}; measured {dates[0]} to {dates[-1]}; "
            f"1-minute load average {min(loads):.1f} to {max(loads):.1f} at the levels' starts and ends.")


def machine_name(rows: Sequence[dict[str, Any]]) -> str:
    """The CPU and its cores (the host's name stays in the results' provenance, not on the pages)."""
    found = rows[0]["provenance"]["machine"]
    return f"{found['cpu']}, {found['cores']} cores"


def line(rows: Sequence[dict[str, Any]]) -> str:
    """The table in one sentence, with the machine named (the README's performance line)."""
    ratios = [ratio_of(row) for row in rows]
    worst = max(rows, key=ratio_of)
    fraction = rows[0]["fraction"]
    what = "whole runs" if fraction == 1.0 else f"the first {fraction:.0%} of each default run"
    return (f"The default callbacks cost a median **{(median(ratios) - 1) * 100:.1f}%** of CPU time on {what} "
            f"({len(rows)} levels, {len(rows[0]['pairs'])} interleaved pairs each, one thread, {machine_name(rows)}): "
            f"{sum(r <= TARGET for r in ratios)} of {len(rows)} at most {TARGET} (ratio to no callbacks), the "
            f"largest {max(ratios):.3f} ({worst['task']} {worst['difficulty']}).")


def compare(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> str:
    """The median ratio of each level in two result sets, side by side."""
    earlier = {(row["task"], row["difficulty"]): ratio_of(row) for row in before}
    lines = ["| task | level | before | after |", "| --- | --- | ---: | ---: |"]
    for row in after:
        old = earlier.get((row["task"], row["difficulty"]))
        lines.append(f"| {row['task']} | {row['difficulty']} | {'—' if old is None else f'{old:.3f}'} | "
                     f"{ratio_of(row):.3f} |")
    return "\n".join(lines)


def report(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overhead")
    parser.add_argument("command", choices=["table", "line", "compare"])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args(argv)
    sets = [read_results(folder if folder.exists() else ROOT / folder) for folder in args.folders]
    empty = [str(folder) for folder, rows in zip(args.folders, sets, strict=True) if not rows]
    if empty:
        parser.error(f"no results in {', '.join(empty)}")
    if args.command == "table":
        rows = [row for rows in sets for row in rows]
        print(f"{describe(rows)}\n\n{table(rows)}\n\n{verdict(rows)}")
    elif args.command == "line":
        print(line([row for rows in sets for row in rows]))
    else:
        if len(sets) != 2:
            parser.error("compare takes two folders: before and after")
        print(compare(*sets))


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    argv = list(argv) if argv is not None else sys.argv[1:]
    if argv and argv[0] in ("table", "line", "compare"):
        report(argv)
        return []
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--all", action="store_true", help="every task and level")
    parser.add_argument("--task", nargs="+", default=["copy"], choices=TASKS)
    parser.add_argument("--difficulty", nargs="+", default=["easy"], choices=DIFFICULTIES)
    parser.add_argument("--shard", default="1/1", help="K/N: the K-th of N interleaved parts of the levels")
    parser.add_argument("--fraction", type=float, default=0.2)
    parser.add_argument("--measures", default="default", help="the measured setting (vs 'none')")
    parser.add_argument("--set", dest="assignments", action="append", default=[], metavar="NAME.OPTION=VALUE",
                        help="an option of train.py's measure callbacks or detector for the measured runs")
    parser.add_argument("--out", type=Path, default=None, help="folder of the results, one JSON per level")
    add_timing_args(parser, repeats=3)
    args = parser.parse_args(argv)
    shard, _, shards = args.shard.partition("/")
    if not (shard.isdigit() and shards.isdigit() and 1 <= int(shard) <= int(shards)):
        parser.error(f"--shard must be K/N with 1 <= K <= N, got {args.shard!r}")
    if not 0 < args.fraction <= 1:
        parser.error(f"--fraction must be in (0, 1], got {args.fraction}")
    clock = apply_timing_args(args)
    levels = [(t, d) for t in (TASKS if args.all else args.task)
              for d in (DIFFICULTIES if args.all else args.difficulty)]
    levels = levels[int(shard) - 1 :: int(shards)]
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        levels = [level for level in levels if not result_path(args.out, *level).exists()]
    rows = []
    with options_set(args.assignments) as chosen:
        if levels:  # warm-up: imports, allocator, matplotlib
            run(["--task", levels[0][0], "--difficulty", levels[0][1], "--stop-at-step", "5", "--measures", "default"])
        for task, difficulty in levels:
            row = measure_level(task, difficulty, args.fraction, args.repeats, clock, args.measures)
            row["provenance"] = provenance(clock, args.threads, chosen)
            row["finished"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
            rows.append(row)
            if args.out is not None:
                result_path(args.out, task, difficulty).write_text(json.dumps(row, indent=1) + "\n")
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    if rows:
        print(f"\n{table(rows)}\n\n{verdict(rows)}")
    return rows


if __name__ == "__main__":
    main()
