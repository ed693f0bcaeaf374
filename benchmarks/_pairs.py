"""Paired whole runs of ``train.py``, the engine of the benchmarks that compare runs (``overhead_budget``,
``schedule_cost``): rounds of one run per name, in an order that turns from round to round, each run's summary kept
packed in ``<folder>/<name>/pair-N.json.gz``, so that the same command, run again, goes on from the whole rounds kept
and anyone can re-score the runs themselves."""

from __future__ import annotations

import itertools
import math
import statistics
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import train
from capgeo_callbacks.run.summary import read_summary
from study.phases.corpus import write_packed

Runs = dict[str, list[dict[str, Any]]]  # each name's summaries, one per round, in order


def run(argv: list[str], keep: Path | None = None) -> dict[str, Any]:
    """``train.py`` on ``argv`` in a folder of its own; its summary returned, and packed into ``keep`` if given."""
    with tempfile.TemporaryDirectory() as logdir:
        summary = train.main([*argv, "--logdir", logdir, "--no-progress"])
    if keep is not None:
        write_packed(summary, keep)
    return summary


def run_order(names: Sequence[str], pair: int) -> list[str]:
    """The order of the runs of round ``pair``: ``names`` turned by ``pair`` places, so that over ``len(names)``
    rounds each run is first, middle and last once (a place in the round that runs faster or slower, as a machine's
    state drifts, weighs on every run alike; two names alternate)."""
    turn = pair % len(names)
    return [*names[turn:], *names[:turn]]


def interval(values: Sequence[float]) -> tuple[float, float]:
    """The mean of ``values`` and the half-width of its 95% interval (Student's t; inf below two values)."""
    from scipy.stats import t

    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.inf
    return mean, float(t.ppf(0.975, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))


def kept_pairs(folder: Path, expected: Mapping[str, Mapping[str, Any]]) -> Runs:
    """The whole rounds an earlier call kept in ``folder`` (each name's run of the round), in order: a benchmark that
    a session's end cut off goes on from them. ``expected`` gives, per name, the summary's fields and the values its
    runs must have; a kept run with another value (another level, setting or schedule), or a folder of runs of a
    name not asked for, is an error."""
    others = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name not in expected) \
        if folder.is_dir() else []
    if others:
        raise SystemExit(f"{folder} holds runs of {', '.join(map(repr, others))}, not asked for here (asked: "
                         f"{', '.join(map(repr, expected))}): give the same settings, or another --out")
    found: Runs = {name: [] for name in expected}
    for pair in itertools.count():
        paths = {name: folder / name / f"pair-{pair}.json.gz" for name in expected}
        if not all(path.is_file() for path in paths.values()):
            return found
        for name, path in paths.items():
            summary = read_summary(path)
            for field, value in expected[name].items():
                if summary.get(field) != value:
                    raise SystemExit(f"{path} is a run of {summary.get('task')}/{summary.get('difficulty')} with "
                                     f"{field} {summary.get(field)!r}, not the {value!r} asked for {name!r}: give "
                                     "another --out")
            found[name].append(summary)
    return found


def more_pairs(runs: Runs, argvs: Mapping[str, list[str]], folder: Path | None, *, max_pairs: int,
               enough: Callable[[Runs], bool], after_pair: Callable[[Runs], None]) -> Runs:
    """Rounds of ``train.py`` on each name's ``argvs`` (in :func:`run_order`), after those in ``runs``, until
    ``enough(runs)`` or ``max_pairs`` rounds; ``after_pair`` is called after each (to write what is made so far), and
    each run's summary is kept in ``folder`` when given."""
    for pair in range(len(next(iter(runs.values()))), max_pairs):
        if pair and enough(runs):
            break
        for name in run_order(list(argvs), pair):
            runs[name].append(run(argvs[name], None if folder is None else folder / name / f"pair-{pair}.json.gz"))
        after_pair(runs)
    return runs


def calls_of(earlier: dict[str, Any], kept: int) -> list[dict[str, Any]]:
    """The calls that made the ``kept`` pairs an earlier result holds: each call's pairs ``[first, end)`` and
    provenance (code and machine: pairs made in several sessions can span machines). An earlier version's result,
    with one provenance, made them all."""
    if "calls" in earlier:
        found = [{**call, "pairs": [call["pairs"][0], min(call["pairs"][1], kept)]} for call in earlier["calls"]]
        return [call for call in found if call["pairs"][0] < call["pairs"][1]]
    return [{"pairs": [0, kept], "provenance": earlier["provenance"]}] if kept and "provenance" in earlier else []


def with_call(calls: list[dict[str, Any]], kept: int, pairs: int, provenance: dict[str, Any]) -> list[dict[str, Any]]:
    """``calls`` and this call, which made pairs ``[kept, pairs)`` (none: left out)."""
    return calls + ([{"pairs": [kept, pairs], "provenance": provenance}] if pairs > kept else [])


def calls_text(calls: list[dict[str, Any]]) -> str:
    """Where and from what code each call's pairs were made, in words (pairs counted from 1)."""
    def one(call: dict[str, Any]) -> str:
        first, end = call["pairs"]
        made = call["provenance"]
        span = f"pair {first + 1}" if end == first + 1 else f"pairs {first + 1}-{end}"
        return f"{span} on {made['machine']['cpu']} at {str(made['commit'])[:7]}"

    return "; ".join(map(one, calls))
