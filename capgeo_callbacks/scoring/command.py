"""``capgeo score``: the scorer's command line (what it prints: :mod:`capgeo_callbacks.scoring.scores`; the leads
table: :mod:`capgeo_callbacks.scoring.leads`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import capgeo_callbacks.scoring.scores as scores
from capgeo_callbacks.keys import RANKME_RECOVERY
from capgeo_callbacks.rules import make_rule
from capgeo_callbacks.scoring.discrimination import LEGEND, SHARES, discrimination, discrimination_table
from capgeo_callbacks.scoring.leads import (
    GRIDS,
    MAX_CONTROL_RATE,
    MAX_FALSE_RATE,
    grid_of,
    leads_table,
    rule_leads,
)
from capgeo_callbacks.scoring.scores import (
    distinct,
    forecast_scores,
    forecast_table,
    load_runs,
    same_run,
    warning_scores,
    warning_table,
)

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=scores.__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="+", help="folders of runs (run folders or *.json.gz summaries); "
                        "a run found twice (the same settings, seed and series) counts once")
    parser.add_argument("--rules", nargs="+", default=[RANKME_RECOVERY, "geometry-guarded", "loss-onset",
                                                       "logprob-emergence", "probe-crossing", "warmup-end",
                                                       "clock-20"], help="rule names (capgeo_callbacks.rules.RULES)")
    parser.add_argument("--forecasters", nargs="*", default=[], help="forecaster rule names")
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="only these seeds (default: every run)")
    parser.add_argument("--shares", nargs="+", type=float, default=list(SHARES),
                        help="shares of the budget at which the AUROC table is computed")
    parser.add_argument("--calibration", type=Path, default=None,
                        help="runs that set the direction of the scores without one a priori (RankMe, weight norm) "
                        "and choose each rule's operating point for the leads table")
    parser.add_argument("--leads", nargs="+", default=None, metavar="RULE",
                        help="rules whose operating point the calibration runs choose from their grid (needs "
                        "--calibration; default: every rule with a grid, capgeo_callbacks.scoring.leads.GRIDS)")
    parser.add_argument("--max-false-rate", type=float, default=MAX_FALSE_RATE,
                        help="at most this share of the calibration runs that never acquire may alert (default "
                        f"{MAX_FALSE_RATE:g})")
    parser.add_argument("--max-control-rate", type=float, default=MAX_CONTROL_RATE,
                        help=f"at most this share of the calibration controls may alert (default {MAX_CONTROL_RATE:g}: "
                        "none)")
    args = parser.parse_args(argv)
    if args.leads is not None and args.calibration is None:
        parser.error("--leads chooses operating points on calibration runs: give --calibration FOLDER")
    for name in ("max_false_rate", "max_control_rate"):
        if not 0 <= getattr(args, name) <= 1:
            parser.error(f"--{name.replace('_', '-')} is a share of runs in [0, 1]; got {getattr(args, name)}")
    try:
        rules = [make_rule(name) for name in args.rules]
        forecasters = [make_rule(name) for name in args.forecasters]
        grids = [grid_of(name) for name in (args.leads if args.leads is not None else GRIDS)]
    except ValueError as error:
        parser.error(str(error))
    if any(not 0 < share <= 1 for share in args.shares):
        parser.error(f"--shares are shares of the budget, in (0, 1]; got {args.shares}")
    runs, reruns = distinct([run for folder in args.runs for run in load_runs(folder, args.seeds)])
    calibration = distinct(load_runs(args.calibration))[0] if args.calibration is not None else None
    both = [run.name for run in runs if any(same_run(run.summary, other.summary) for other in calibration or ())]
    if both:
        parser.error(f"{len(both)} runs scored are calibration runs too ({', '.join(both[:3])}): directions and "
                     "operating points are never chosen on the runs they are scored on")
    print(f"{len(runs)} runs: {sum(r.acquisition is not None and not r.control for r in runs)} acquired "
          f"({sum(r.acquired_fully and not r.control for r in runs)} fully), {sum(r.control for r in runs)} controls, "
          f"{sum(r.acquisition is None and not r.control for r in runs)} never acquired"
          + "".join(f"; {rerun.name} is a rerun of {kept.name}, counted once" for rerun, kept in reruns) + "\n")
    warnings = [warning_scores(rule, runs) for rule in rules]
    print(warning_table(warnings))
    if forecasters:
        print()
        print(forecast_table([forecast_scores(rule, runs) for rule in forecasters]))
    print(f"\nWho will learn. {LEGEND}\n")
    print(discrimination_table(discrimination(runs, {s["rule"]: s["fired"] for s in warnings}, forecasters,
                                              args.shares, calibration)))
    if calibration is not None:
        print(f"\nLeads at a capped false-alarm rate: each rule's operating point chosen on the {len(calibration)} "
              f"calibration runs (the most acquirers warned before acquisition, at most {args.max_false_rate:g} of "
              f"the runs that never acquire and {args.max_control_rate:g} of the controls alerting), held out on "
              f"the {len(runs)} runs above.\n")
        print(leads_table(rule_leads(grids, calibration, runs, args.max_false_rate, args.max_control_rate)))


if __name__ == "__main__":
    main()
