"""The study's record: every page and generated passage of README.md and docs/, read from the committed corpus
(``python -m study.record.summary`` rewrites them all)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence


def page_command(module: str, doc: str, write: Callable[[], str], readme: Callable[[], str],
                 argv: Sequence[str] | None = None, more: Mapping[str, Callable[[], str]] | None = None) -> None:
    """``python -m study.record.<module> [page|readme|...]``: a registered test's page written to ``doc`` (and
    printed), the README's line from the same figures, or another README passage named in ``more``."""
    passages = {"readme": readme, **(more or {})}
    parser = argparse.ArgumentParser(prog=f"python -m study.record.{module}", description=f"writes {doc}")
    parser.add_argument("what", nargs="?", choices=("page", *passages), default="page",
                        help="the page (default), the README's line from the same figures, or another of its passages")
    what = parser.parse_args(argv).what
    print(write() if what == "page" else passages[what]())
