"""``python -m capgeo_callbacks.registry --markdown``: the measure table (docs/measures.md) on stdout, or
``--write PATH`` into a file."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from capgeo_callbacks.registry import BUILTIN_MEASURES, measures_markdown


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capgeo_callbacks.registry",
                                     description="The registered measures, as docs/measures.md.")
    parser.add_argument("--markdown", action="store_true", help="print the Markdown page of capgeo's measures")
    parser.add_argument("--write", metavar="PATH", help="write it to PATH instead (e.g. docs/measures.md)")
    args = parser.parse_args(argv)
    if not (args.markdown or args.write):
        parser.error("give --markdown or --write PATH")
    text = measures_markdown(BUILTIN_MEASURES)
    if args.write:
        Path(args.write).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
