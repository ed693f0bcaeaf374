"""The story figure of a finished run, drawn on demand from its summary: ``python -m capgeo_callbacks.offline.story``::

    python -m capgeo_callbacks.offline.story runs/sort-hard-xs-s0/version_0          # writes capgeo_story.png there
    python -m capgeo_callbacks.offline.story capgeo_summary.json --out story.png

A live run draws no full figure (its loggers get the story card and the heatmap, where they show images): accuracy
and log-prob over RankMe per layer, the alerts and acquisition marked, as PNG beside the summary.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from capgeo_callbacks.publish.figures import plot_run
from capgeo_callbacks.run.summary import read_summary

__all__ = ["STORY_FILENAME", "draw_story", "main"]

STORY_FILENAME = "capgeo_story.png"


def draw_story(run: str | Path, out: str | Path | None = None) -> Path:
    """The story figure of the run whose summary is ``run`` (a run folder or a summary file), saved as PNG at ``out``
    (default: ``capgeo_story.png`` beside the summary). Returns the path written."""
    run = Path(run)
    summary = read_summary(run)
    folder = run if run.is_dir() else run.parent
    path = Path(out) if out is not None else folder / STORY_FILENAME
    return plot_run(str(summary.get("task", "run")), summary, path, dpi=100)  # as a run drew it at its end before


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capgeo_callbacks.offline.story",
                                     description="Draw a finished run's story figure from its summary.")
    parser.add_argument("run", help="a run folder (holding capgeo_summary.json) or a summary file (.json, .json.gz)")
    parser.add_argument("--out", default=None, help=f"PNG path (default: {STORY_FILENAME} beside the summary)")
    args = parser.parse_args(argv)
    try:
        path = draw_story(args.run, args.out)
    except (OSError, ValueError) as err:
        parser.error(f"{args.run}: {err}")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
