"""``capgeo measures`` (``python -m capgeo_callbacks.registry``): the registered measures, one line each; with
``--markdown`` the measure table (docs/measures.md), with ``--glance`` the callbacks at a glance (docs/callbacks.md),
on stdout or ``--write PATH`` into a file."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from capgeo_callbacks.registry import BUILTIN_MEASURES, measures_markdown
from capgeo_callbacks.registry.glance import glance_markdown


def listing() -> str:
    """The registered measures, one line each: name, cost, callback, default cadence and logged keys."""
    from capgeo_callbacks.registry import measure_specs

    return "".join(f"{spec.name:<10} {spec.cost:<7} {spec.callback.__name__:<20} every {spec.every_n_evals:<3} "
                   f"{', '.join(spec.keys)}{'  (default)' if spec.default else ''}\n" for spec in measure_specs())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capgeo_callbacks.registry",
                                     description="The registered measures: what each needs, costs and logs.")
    page = parser.add_mutually_exclusive_group()
    page.add_argument("--markdown", action="store_true", help="print the Markdown page of capgeo's measures")
    page.add_argument("--glance", action="store_true", help="print the Markdown page of the callbacks at a glance")
    parser.add_argument("--write", metavar="PATH", help="write the page to PATH instead (e.g. docs/measures.md)")
    args = parser.parse_args(argv)
    if args.glance:
        text = glance_markdown(BUILTIN_MEASURES)
    elif args.markdown or args.write:
        text = measures_markdown(BUILTIN_MEASURES)
    else:
        text = listing()
    if args.write:
        Path(args.write).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
