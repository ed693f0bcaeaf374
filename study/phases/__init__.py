"""The study's phases: the runs it makes through the package's launcher (``capgeo_callbacks.sweeps``), each
resumable, each exported to ``corpus/``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from study.checkout import ROOT


def registered_phase_command(module: str, doc: str | None, phases: Sequence[str], fitted: Path,
                             run_phase: Callable[[str, str, int], list[Path]], fit: Callable[[], dict[str, Any]],
                             pilots: Callable[[], str], argv: Sequence[str] | None = None) -> None:
    """``python -m study.phases.<module> run PHASE | fit | pilots``: a registered study's runs through the launcher,
    the fit on its calibration runs (written to ``fitted``), and the table of its pilots."""
    parser = argparse.ArgumentParser(prog=f"python -m study.phases.{module}", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="the registered runs of a phase, through the launcher")
    run.add_argument("phase", choices=phases)
    run.add_argument("--engine", default="ray", choices=("ray", "submitit"))
    run.add_argument("--workers", type=int, default=2)
    sub.add_parser("fit", help=f"fit on the calibration runs -> {fitted.relative_to(ROOT)}")
    sub.add_parser("pilots", help="the pilot runs' outcomes")
    args = parser.parse_args(argv)
    if args.command == "run":
        for target in run_phase(args.phase, args.engine, args.workers):
            print(target.relative_to(ROOT))
    elif args.command == "fit":
        fitted.write_text(json.dumps(fit(), indent=1, allow_nan=False) + "\n")
        print(fitted.relative_to(ROOT))
    else:
        print(pilots())
