"""The overhead budget's real ratio: ``train.py`` with the default measures under budgets, against ``--measures none``.

    python -m benchmarks.overhead_budget --task mod --difficulty hard --max-steps 600 --stop-at-step 600 --repeats 2

One small run (``--max-steps`` steps, stopped at ``--stop-at-step``, under the whole run's evaluation schedule) is
trained, interleaved and ``repeats`` times each, with ``--measures none`` and with the default measures under each
budget of ``--budgets`` (0 is the budget off: every measurement, as before the budget existed), on one thread,
process CPU time. Each measured run gives its ratio against the ``none`` run of the same round, and its summary's
record of the budget (capgeo's share as the budget measured it, whether it was kept, and how many evaluations each
piece of work was thinned at). A ratio is compared with the budget as ``1 + budget``; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import train
from benchmarks._timing import add_timing_args, apply_timing_args, interleaved, median


def run(argv: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as logdir:
        return train.main([*argv, "--logdir", logdir, "--no-progress"])


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="mod")
    parser.add_argument("--difficulty", default="hard")
    parser.add_argument("--max-steps", type=int, default=600, help="the run's budget (0: the level's)")
    parser.add_argument("--stop-at-step", type=int, default=600)
    parser.add_argument("--budgets", type=float, nargs="+", default=[0.0, 0.03, 0.01])
    parser.add_argument("--measures", default="default",
                        help="train.py --measures of the measured runs (with the registered rules, the default "
                             "measures are all rule inputs: only the live story card is optional; 'all' adds the "
                             "costly measures, which are)")
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    add_timing_args(parser, repeats=2)
    args = parser.parse_args(argv)
    clock = apply_timing_args(args)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    base = ["--task", args.task, "--difficulty", args.difficulty, "--stop-at-step", str(args.stop_at_step),
            *(["--max-steps", str(args.max_steps)] if args.max_steps else [])]
    summaries: dict[str, list[dict[str, Any]]] = {}

    def measured(budget: float) -> Any:
        def go() -> None:
            summaries.setdefault(f"{budget:g}", []).append(run([*base, "--measures", args.measures,
                                                                "--overhead-budget", str(budget)]))
        return go

    candidates = {"none": lambda: run([*base, "--measures", "none"]),
                  **{f"{budget:g}": measured(budget) for budget in args.budgets}}
    load = os.getloadavg()
    times = interleaved(candidates, args.repeats, warmup=0, clock=clock)
    rows = []
    for name in candidates:
        if name == "none":
            continue
        ratios = [t / n for t, n in zip(times[name], times["none"], strict=True)]
        records = [summary.get("overhead") for summary in summaries[name]]
        shares = [record["share"] for record in records if record]
        thinned: dict[str, list[int]] = {}
        for record in records:
            for work, counts in (record or {}).get("work", {}).items():
                thinned.setdefault(work, []).append(counts["thinned"])
        rows.append({"budget": float(name), "ratios": ratios, "ratio": median(ratios), "shares": shares,
                     "thinned": thinned, "evaluations": len(summaries[name][0]["series"]["acc"])})
    steps = summaries[next(iter(summaries))][0]["steps"]
    print(f"{args.task}/{args.difficulty}, the first {steps} steps of its run; --measures {args.measures} under each "
          "budget vs "
          f"--measures none; {args.repeats} interleaved round(s), {clock} time, {args.threads} thread(s); none: "
          f"{', '.join(f'{t:.1f}' for t in times['none'])} s; 1-minute load {load[0]:.1f} to {os.getloadavg()[0]:.1f}")
    print("| budget | ratio of each round | median ratio | capgeo's share as the budget measured it | thinned (per "
          "piece of work, each round) |")
    print("| ---: | --- | ---: | --- | --- |")
    for row in rows:
        budget = "off" if row["budget"] == 0 else f"{row['budget']:g}"
        shares = ", ".join(f"{share:.3f}" for share in row["shares"]) or "(not measured: off)"
        thinned = "; ".join(f"{work} {', '.join(map(str, counts))}" for work, counts in row["thinned"].items()
                            if any(counts)) or "nothing"
        print(f"| {budget} | {', '.join(f'{r:.3f}' for r in row['ratios'])} | {row['ratio']:.3f} | {shares} | "
              f"{thinned} |")
    result = {"task": args.task, "difficulty": args.difficulty, "steps": steps, "measures": args.measures,
              "clock": clock, "threads": args.threads,
              "none": times["none"], "rows": rows, "load_average": [load[0], os.getloadavg()[0]]}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
