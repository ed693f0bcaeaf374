"""The ``capgeo`` command: one entry point for capgeo's tools.

    capgeo score RUNS --rules probe-crossing clock-20  # score warning rules and forecasters on a folder of runs
    capgeo score RUNS --calibration CAL                # ... and each rule's lead at a point chosen on CAL
    capgeo offline CHECKPOINTS...                      # RankMe and detection over saved checkpoints
    capgeo dashboard RUN OUT                           # screenshots of a run's TensorBoard dashboard
    capgeo measures                                    # the registered measures
    capgeo sweep my_module:train --grid lr=0.001,0.003 # your training function over a grid, on Ray Tune or submitit

Each sub-command is the module it names, with its own ``--help``; ``python -m capgeo_callbacks.scoring`` and
``python -m capgeo_callbacks.offline`` run the same code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from capgeo_callbacks import __version__

__all__ = ["COMMANDS", "main"]

# name -> (module whose main(argv) runs it, what it does)
COMMANDS: dict[str, tuple[str, str]] = {
    "score": ("capgeo_callbacks.scoring.command", "score warning rules and forecasters on a folder of runs; with "
              "calibration runs, each rule's operating point and its lead"),
    "offline": ("capgeo_callbacks.offline.cli", "per-layer RankMe and detection over saved checkpoints or "
                "Hugging Face revisions"),
    "dashboard": ("capgeo_callbacks.publish.screenshots", "screenshots of a run's TensorBoard dashboard (needs "
                  "Chromium)"),
    "measures": ("capgeo_callbacks.registry.__main__", "the registered measures: what each needs, costs and logs"),
    "story": ("capgeo_callbacks.offline.story", "draw a finished run's story figure from its summary"),
    "sweep": ("capgeo_callbacks.sweeps.cli", "your training function fn(config) over a grid of its settings, on Ray "
              "Tune or submitit, resumable (the sweep extra)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="capgeo", description="capgeo: watch the geometry of a transformer's "
                                     "hidden states while it trains. Each command has its own --help.")
    parser.add_argument("--version", action="version", version=f"capgeo-callbacks {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, (_, text) in COMMANDS.items():
        commands.add_parser(name, help=text, description=text, add_help=False)  # its own parser says the rest
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``capgeo COMMAND ARGS...``: the command's module's ``main(ARGS)``; its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0] not in COMMANDS:
        parser.parse_args(argv or ["--help"])  # --help, --version, or an unknown command: argparse says so
        return 2
    module, _ = COMMANDS[argv[0]]
    program, sys.argv[0] = sys.argv[0] if sys.argv else "", f"capgeo {argv[0]}"  # a parser's default prog
    try:
        status = importlib.import_module(module).main(argv[1:])
    finally:
        if sys.argv:
            sys.argv[0] = program
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
