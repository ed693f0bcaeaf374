"""capgeo's self-measured share against paired whole runs: ``train.py`` with the default measures under each
``--overhead-budget`` setting, against the same run with ``--measures none``.

    python -m benchmarks.overhead_budget --task sort --difficulty hard --out benchmarks/results/budget/sort-hard.json
    python -m benchmarks.overhead_budget --task reverse --difficulty easy --out benchmarks/results/budget/reverse.json
    python -m benchmarks.overhead_budget --task mod --difficulty hard --max-steps 40 --stop-at-step 12 --min-pairs 1 \\
        --max-pairs 1                                                               # a smoke test, no figure to keep
    python -m benchmarks.overhead_budget --report benchmarks/results/budget/sort-hard.json    # a result, as a table

Each round trains the bare run (``--measures none --overhead-budget off``) and one run per setting of ``--settings``
(default ``measure`` and ``0.03``: every series whole, and the budget), in an order that turns from round to round
(:func:`benchmarks._pairs.run_order`: each run takes each place in turn), on one thread. A measured run's ratio is
its fitting CPU time over the bare run's of the same round (the summary's ``cpu_seconds``: from the start of fitting,
as the budget counts).
Rounds go on from ``--min-pairs`` until every setting's mean ratio has a 95% interval (Student's t) at most ``--width``
either side, or until ``--max-pairs``. Each run's summary gives the self-measured figures: capgeo's CPU share over the
whole run and after the protected start, and the ratio it predicts against the bare run, ``(run + capgeo) / (run +
detector)`` (the bare run keeps the detector that writes its summary). A setting agrees with its pairs when the interval
holds the median predicted ratio. With ``--out X.json``, each run's summary is kept, packed, in ``X/<setting>/``
(``none``: the bare runs), so that anyone can re-score the shares (``python -m benchmarks.overhead_shares line
X/0.03``), and the same command, run again, goes on from the whole pairs kept there (a session that ended mid-way loses
one pair).
Nothing is asserted: run it on a quiet machine, never beside other work.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._pairs import Runs, calls_of, calls_text, interval, kept_pairs, more_pairs, with_call
from benchmarks._timing import apply_timing_args
from benchmarks.overhead import provenance
from capgeo_callbacks.publish.text import markdown_row
from capgeo_callbacks.run.budget import overhead_budget_arg
from capgeo_callbacks.run.reading import capgeo_share


def predicted_ratio(summary: dict[str, Any]) -> float | None:
    """The ratio against the bare run that a run's own record predicts: ``(run + capgeo) / (run + detector)``, CPU."""
    record = summary.get("overhead") or {}
    run_cpu, own = record.get("run_cpu_seconds"), record.get("capgeo_cpu_seconds")
    if not run_cpu or own is None:
        return None
    detector = (record.get("work") or {}).get("detector", {}).get("cpu_seconds", 0.0)
    return (run_cpu + own) / (run_cpu + detector)


def row(setting: str, ratios: list[float], summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """One setting's pairs and what its runs measured of themselves."""
    mean, half = interval(ratios)
    predicted = [p for p in map(predicted_ratio, summaries) if p is not None]
    expected = statistics.median(predicted) if predicted else None
    return {"setting": setting, "ratios": ratios, "mean": mean, "half_width": half,
            "whole_run": [capgeo_share(s) for s in summaries],
            "after_start": [capgeo_share(s, part="after_start") for s in summaries],
            "predicted": predicted, "agrees": None if expected is None or math.isinf(half) else
            abs(expected - mean) <= half,
            "thinned": [(s.get("overhead") or {}).get("thinned") for s in summaries],
            "stride": [(s.get("overhead") or {}).get("rule_input_stride") for s in summaries]}


def median(values: list[Any]) -> str:
    """The median of the values found, as text ("-": none)."""
    found = [v for v in values if v is not None]
    return f"{statistics.median(found):.4f}" if found else "-"


def report(result: dict[str, Any]) -> str:
    """A result (what ``--out`` writes) in words and a Markdown table: each setting's pairs, their mean ratio and
    its interval (what agreement is judged on), their median ratio (beside it: one pair whose bare run ran fast moves
    the mean of every setting) and what the measured runs said of themselves."""
    bare = result["bare"]
    if result.get("loads"):
        load = f"1-minute load after each of the last {len(result['loads'])} pair(s): " + \
            ", ".join(f"{x:.1f}" for x in result["loads"])
    elif result.get("load_average"):  # an earlier version's: at its start and after its last pair
        load = "1-minute load {:.1f} at the start, {:.1f} after the last pair".format(*result["load_average"])
    else:
        load = "load not recorded"
    size = f", size {result['size']} ({result['parameters'] / 1e6:.1f}M parameters)" if result.get("parameters") else ""
    points = f" ({result['eval_points']} evaluation points)" if result.get("eval_points") else ""
    lines = [f"{result['task']}/{result['difficulty']}{size}, {result['steps']} steps{points}, --measures "
             f"{result['measures']} "
             f"under each --overhead-budget vs --measures none; {len(bare)} interleaved pair(s), fitting CPU time, "
             f"{result['threads']} thread(s); bare: {', '.join(f'{b:.1f}' for b in bare)} s; {load}"
             + (f"; pairs go on until each interval is at most ±{result['width']}" if result.get("width") else "")
             + (f"; {calls_text(result['calls'])}" if result.get("calls") else ""),
             "",
             markdown_row(["setting", "ratio of each pair", "mean ratio [95% interval]", "median ratio",
                           "capgeo's CPU share, whole run (median)", "after the protected start (median)",
                           "ratio it predicts (median)", "agrees", "thinned", "stride"]),
             markdown_row(["---", "---", "---", "---:", "---:", "---:", "---:", "---", "---:", "---:"])]
    for r in result["rows"]:
        lines.append(markdown_row([
            r["setting"], ", ".join(f"{x:.3f}" for x in r["ratios"]),
            f"{r['mean']:.3f} [{r['mean'] - r['half_width']:.3f}, {r['mean'] + r['half_width']:.3f}]",
            median(r["ratios"]), median(r["whole_run"]), median(r["after_start"]), median(r["predicted"]),
            str(r["agrees"]), median(r["thinned"]), median(r["stride"])]))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="sort")
    parser.add_argument("--difficulty", default="hard")
    parser.add_argument("--size", default="", help="the model's size, a key of models.SIZES (default: the level's)")
    parser.add_argument("--max-steps", type=int, default=0, help="the run's budget (0: the level's)")
    parser.add_argument("--stop-at-step", type=int, default=0, help="stop early (0: the whole run)")
    parser.add_argument("--eval-points", type=int, default=0, help="the schedule's evaluations, the same in every run "
                                                                    "(0: train.py's default)")
    parser.add_argument("--settings", nargs="+", default=["measure", "0.03"], help="--overhead-budget values")
    parser.add_argument("--measures", default="default", help="train.py --measures of the measured runs")
    parser.add_argument("--min-pairs", type=int, default=5)
    parser.add_argument("--max-pairs", type=int, default=30)
    parser.add_argument("--width", type=float, default=0.02, help="stop when every 95%% interval is at most this "
                                                                  "either side of its mean ratio")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    parser.add_argument("--report", type=Path, default=None, help="run nothing: print the result written there")
    args = parser.parse_args(argv)
    if args.report is not None:
        result = json.loads(args.report.read_text())
        print(report(result))
        return result
    for setting in args.settings:
        overhead_budget_arg(setting)  # a bad setting fails here, before any run
    args.repeats, args.clock = 1, "cpu"
    apply_timing_args(args)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    base = ["--task", args.task, "--difficulty", args.difficulty, *(["--size", args.size] if args.size else []),
            *(["--max-steps", str(args.max_steps)] if args.max_steps else []),
            *(["--stop-at-step", str(args.stop_at_step)] if args.stop_at_step else []),
            *(["--eval-points", str(args.eval_points)] if args.eval_points else [])]
    argvs = {"none": [*base, "--measures", "none", "--overhead-budget", "off"],
             **{s: [*base, "--measures", args.measures, "--overhead-budget", s] for s in args.settings}}
    kept = None if args.out is None else args.out.with_suffix("")
    given = {field: value for field, value in (("size", args.size), ("max_steps", args.max_steps),
                                                ("stop_at_step", args.stop_at_step), ("eval_points", args.eval_points))
             if value}
    expected = {name: {"task": args.task, "difficulty": args.difficulty, **given,
                       "overhead_budget": overhead_budget_arg("off" if name == "none" else name)} for name in argvs}
    summaries: Runs = {name: [] for name in argvs} if kept is None else kept_pairs(kept, expected)
    if summaries["none"]:
        print(f"going on after the {len(summaries['none'])} pair(s) kept in {kept}")
    earlier = json.loads(args.out.read_text()) if summaries["none"] and args.out.is_file() else {}
    loads: list[float] = list(earlier.get("loads", []))[:len(summaries["none"])]  # 1-minute load after each pair
    made_with = provenance("cpu", args.threads, {})  # this call's code and machine, read once
    n_kept, calls = len(summaries["none"]), calls_of(earlier, len(summaries["none"]))

    def tally(runs: Runs) -> dict[str, Any]:
        bare = [s["cpu_seconds"] for s in runs["none"]]
        rows = [row(s, [m["cpu_seconds"] / n for m, n in zip(runs[s], bare, strict=True)], runs[s])
                for s in args.settings]
        first, made = runs["none"][0], with_call(calls, n_kept, len(bare), made_with)  # the last gives "provenance"
        return {"task": args.task, "difficulty": args.difficulty, "size": first.get("size"),
                "parameters": first.get("parameters"), "steps": first["steps"],
                "eval_points": first.get("eval_points"), "measures": args.measures,
                "threads": args.threads, "width": args.width, "bare": bare, "rows": rows, "loads": loads,
                **({"load_average": earlier["load_average"]} if "load_average" in earlier else {}),
                "calls": made, "provenance": made[-1]["provenance"] if made else made_with}

    def enough(runs: Runs) -> bool:
        return len(runs["none"]) >= args.min_pairs and all(r["half_width"] <= args.width for r in tally(runs)["rows"])

    def write(runs: Runs) -> None:
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(tally(runs), indent=1, default=str))

    def after_pair(runs: Runs) -> None:
        loads.append(os.getloadavg()[0])
        write(runs)  # after every pair: a session that ends mid-way keeps the pairs it made

    if summaries["none"]:
        write(summaries)  # the kept pairs, as this version of the benchmark tallies them
    more_pairs(summaries, argvs, kept, max_pairs=args.max_pairs, enough=enough, after_pair=after_pair)
    if not summaries["none"]:
        raise SystemExit("no pair made: --max-pairs must be at least 1")
    result = tally(summaries)
    print(report(result))
    return result


if __name__ == "__main__":
    main()
