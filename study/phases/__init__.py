"""The study's phases: the runs it makes through the package's launcher (``capgeo_callbacks.sweeps``), each
resumable, each exported to ``study/corpus/``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from study.checkout import ROOT


def _launch_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", default="ray", choices=("ray", "submitit"))
    parser.add_argument("--workers", type=int, default=2)


def registered_phase_command(module: str, doc: str | None, phases: Sequence[str], fitted: Path,
                             run_phase: Callable[[str, str, int], list[Path]], fit: Callable[[], dict[str, Any]],
                             pilots: Callable[[], str], argv: Sequence[str] | None = None,
                             run_pilots: Callable[[str, int], list[Path]] | None = None) -> None:
    """``python -m study.phases.<module> run PHASE | PHASE run | fit | pilots [run]``: a registered study's runs
    through the launcher (``run PHASE`` and ``PHASE run`` alike), the fit on its calibration runs (written to
    ``fitted``), and the table of its pilots (with ``run_pilots``, ``pilots run`` runs them first)."""
    parser = argparse.ArgumentParser(prog=f"python -m study.phases.{module}", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="the registered runs of a phase, through the launcher")
    run.add_argument("phase", choices=phases)
    _launch_options(run)
    for phase in phases:
        named = sub.add_parser(phase, help=f"run: the registered {phase} runs, through the launcher")
        named.add_argument("action", choices=("run",))
        _launch_options(named)
    sub.add_parser("fit", help=f"fit on the calibration runs -> {fitted.relative_to(ROOT)}")
    table = sub.add_parser("pilots", help="the pilot runs' outcomes" + (", or (run) the pilot runs"
                                                                         if run_pilots is not None else ""))
    if run_pilots is not None:
        table.add_argument("action", nargs="?", choices=("table", "run"), default="table")
        _launch_options(table)
    args = parser.parse_args(argv)
    if args.command == "run" or args.command in phases:
        for target in run_phase(args.phase if args.command == "run" else args.command, args.engine, args.workers):
            print(target.relative_to(ROOT))
    elif args.command == "fit":
        fitted.write_text(json.dumps(fit(), indent=1, allow_nan=False) + "\n")
        print(fitted.relative_to(ROOT))
    else:
        if run_pilots is not None and args.action == "run":
            for target in run_pilots(args.engine, args.workers):
                print(target.relative_to(ROOT))
        print(pilots())
