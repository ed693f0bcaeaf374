"""Sweep report
============

The study's tables and plots from a folder of finished runs (docs/design.md, "Reports"), read from the runs'
``capgeo_summary.json`` files only, so it works for any Lightning module the callbacks watched::

    python -m study.record.report runs/sweep            # writes runs/sweep/report/
    python -m study.record.report runs/sweep --out out --layer norm_f

It writes ``report.md`` and ``runs.csv`` (one row per run), ``grid.png`` (every run, rows tasks, columns
difficulty / size) and ``plots/<run>.png`` (RankMe per layer beside accuracy, one per run).

A run is the folder above ``version_*`` (train.py's ``TASK-DIFFICULTY-SIZE-sSEED``); when it holds several
versions, the newest one that has a summary is used. Missing values (not acquired, no collapse) show as
"—" in the Markdown and as empty cells in the CSV.

The pure functions (:func:`find_runs`, :func:`run_row`, :func:`precursor_rates`, :func:`rankme_curve`,
:func:`curve_correlation`, :func:`size_correlations`, :func:`render_markdown`) take and return plain data;
:func:`build_report` and :func:`main` do the file work. Model sizes are ordered by the summaries'
``parameters``, never by importing the model package.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from capgeo_callbacks.publish.figures import plot_grid, plot_run
from capgeo_callbacks.run.reading import find_runs
from capgeo_callbacks.run.summary import SUMMARY_FILENAME
from study.record.report.curves import size_correlations
from study.record.report.rows import CSV_COLUMNS, MISSING, precursor_rates, run_row

# ------------------------------------------------------------------------------------------- rendering


def fmt(value: Any, digits: int = 2) -> str:
    """A table cell: "—" for None/NaN, floats to ``digits`` decimals, ints as they are."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _floors_cell(floors: Mapping[str, Any]) -> str:
    if not floors or all(value is None for value in floors.values()):
        return MISSING
    return "; ".join(f"{name} {fmt(value)}" for name, value in floors.items())


def _emergence_cell(row: Mapping[str, Any]) -> str:
    if row.get("logprob_emergence_step") is None:
        return MISSING
    return f"{row['logprob_emergence_step']} (acc {fmt(row.get('acc_at_logprob_emergence'))})"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|")


def render_markdown(
    rows: Sequence[Mapping[str, Any]],
    rates: Sequence[Mapping[str, Any]],
    correlations: Sequence[Mapping[str, Any]],
    *,
    runs_dir: str = "",
    plots: Mapping[str, str] | None = None,
    grid: str | None = None,
    difficulty: str = "hard",
) -> str:
    """The report as Markdown: runs table, precursor rates, size correlations, plots.

    Args:
        rows: from :func:`run_row`.
        rates: from :func:`precursor_rates`.
        correlations: from :func:`size_correlations`.
        runs_dir: shown in the heading line.
        plots: run name -> relative path of its plot (linked from the runs table).
        grid: relative path of the grid figure, embedded if given.
        difficulty: the difficulty the precursor rates were counted on.
    """
    plots = plots or {}
    out = [
        "# capgeo report",
        "",
        f"{len(rows)} run{'s' if len(rows) != 1 else ''} from `{runs_dir}` (the newest `version_*` with a "
        f"summary per run). {MISSING} = none (not acquired, no collapse, not measured).",
        "",
        "## Runs",
        "",
        "Verdict and gap per docs/design.md (gap = acquisition step - collapse step). Collapse floor: the lowest "
        "RankMe after the peak of each layer's collapse. Layer-order rho: Spearman of depth with collapse "
        "step (negative = deeper layers collapse first).",
        "",
        "| run | task | difficulty | size | parameters | steps | verdict | gap | acquisition step "
        "| log-prob emergence (acc there) | collapse floor per layer | layer-order rho | plot |",
        "| --- | --- | --- | --- | ---: | ---: | --- | ---: | ---: | --- | --- | ---: | --- |",
    ]
    for row in rows:
        parameters = row.get("parameters")
        steps = fmt(row.get("steps"))
        if row.get("max_steps") not in (None, row.get("steps")):
            steps += f" / {row['max_steps']}"
        plot = f"[png]({plots[row['run']]})" if row["run"] in plots else MISSING
        cells = [row["run"], fmt(row.get("task")), fmt(row.get("difficulty")), fmt(row.get("size")),
                 f"{parameters:,}" if isinstance(parameters, int) else fmt(parameters), steps,
                 fmt(row.get("verdict")), fmt(row.get("gap")), fmt(row.get("acquisition_step")),
                 _emergence_cell(row), _floors_cell(row.get("floors", {})), fmt(row.get("layer_order_rho"), 3), plot]
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    out += [
        "",
        f"## Precursor rate on {difficulty} tasks",
        "",
        f"Per measure, the {difficulty} runs whose transition came before acquisition. `RankMe verdict` counts "
        "runs with verdict `precursor` (collapse and recovery before acquisition); the other rows use each "
        "measure's own transition (`measures` in the summary: collapse for ranks, crossing 0.5 for probe "
        "accuracy, largest change for Hessian and LLC) lying more than the simultaneity window before "
        "acquisition; `(any layer)` counts a run once if any layer's did. Rate = preceded / runs; "
        "rate (acquired) = preceded / acquired.",
        "",
    ]
    if rates:
        out += ["| measure | runs | acquired | preceded | rate | rate (acquired) |",
                "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for rate in rates:
            out.append(f"| {_cell(rate['measure'])} | {rate['runs']} | {rate['acquired']} | {rate['preceded']} | "
                       f"{fmt(rate['rate'])} | {fmt(rate['rate_acquired'])} |")
    else:
        out.append(f"No {difficulty} runs.")
    out += [
        "",
        "## Small-model RankMe curves against larger sizes",
        "",
        "Spearman rank correlation of the smallest size's RankMe curve with each larger size's on the same "
        "task and difficulty, over normalised training progress (step / max_steps, interpolated onto a "
        "common grid; seeds averaged), on the deepest watched layer unless `--layer` names one. The study "
        "reports rho > 0.92.",
        "",
    ]
    if correlations:
        out += ["| task | difficulty | smallest size (parameters, seeds) | larger size (parameters, seeds) "
                "| layer | rho |", "| --- | --- | --- | --- | --- | ---: |"]
        for c in correlations:
            out.append(f"| {c['task']} | {c['difficulty']} | {c['small_size']} ({c['small_parameters']:,}, "
                       f"{c['small_seeds']}) | {c['large_size']} ({c['large_parameters']:,}, {c['large_seeds']}) "
                       f"| {_cell(c['layer'])} | {fmt(c['rho'], 3)} |")
        defined = [c["rho"] for c in correlations if c["rho"] is not None]
        if defined:
            out += ["", f"Median rho over {len(defined)} pair{'s' if len(defined) != 1 else ''}: "
                        f"{float(np.median(defined)):.3f} (min {min(defined):.3f})."]
    else:
        out.append(f"{MISSING} (needs runs of at least two sizes on the same task and difficulty).")
    if grid:
        out += ["", "## All runs", "", "RankMe per layer (colour: shallow to deep), accuracy (black) and "
                "acquisition (red, dashed); rows tasks, columns difficulty / size.", "", f"![all runs]({grid})"]
    return "\n".join(out) + "\n"


def write_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """One line per run: :data:`CSV_COLUMNS`, then ``floor/<layer>``, ``min_rankme/<layer>``,
    ``collapse_step/<layer>`` for every layer seen and ``precedes/<tag>`` for every measure; missing
    values are empty cells."""
    extra: list[str] = []
    for key in ("floors", "min_rankme", "collapse_steps", "precedes"):
        prefix = {"floors": "floor", "collapse_steps": "collapse_step"}.get(key, key)
        for row in rows:
            for name in row.get(key, {}):
                column = f"{prefix}/{name}"
                if column not in extra:
                    extra.append(column)
    path = Path(path)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*CSV_COLUMNS, *extra])
        for row in rows:
            flat = {column: row.get(column) for column in CSV_COLUMNS}
            for key in ("floors", "min_rankme", "collapse_steps", "precedes"):
                prefix = {"floors": "floor", "collapse_steps": "collapse_step"}.get(key, key)
                flat.update({f"{prefix}/{name}": value for name, value in row.get(key, {}).items()})
            writer.writerow(["" if flat.get(c) is None else flat[c] for c in (*CSV_COLUMNS, *extra)])
    return path


# ------------------------------------------------------------------------------------------------- CLI


def _plot_filename(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "__", name) + ".png"


def build_report(
    runs_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    layer: str | None = None,
    difficulty: str = "hard",
    grid_points: int = 101,
    plots: bool = True,
) -> dict[str, Any]:
    """Read every run under ``runs_dir`` and write the report files into ``out_dir``.

    Args:
        runs_dir: the folder of runs (searched recursively for summaries).
        out_dir: where to write (default ``runs_dir/report``).
        layer: layer for the size correlations (default: each run's deepest).
        difficulty: the difficulty of the precursor rates.
        grid_points: grid size of the curve correlation.
        plots: whether to draw the PNG figures.

    Returns:
        ``{"markdown", "csv", "grid", "plots", "runs"}``: paths written (``grid`` None and ``plots`` empty
        without plots) and the number of runs.

    Raises:
        FileNotFoundError: if ``runs_dir`` is missing or holds no summary.
    """
    records = find_runs(runs_dir)
    if not records:
        raise FileNotFoundError(f"no {SUMMARY_FILENAME} under {str(runs_dir)!r}: run train.py or sweep.py first")
    out = Path(out_dir) if out_dir is not None else Path(runs_dir) / "report"
    out.mkdir(parents=True, exist_ok=True)
    rows = [run_row(record) for record in records]
    plot_paths: dict[str, str] = {}
    grid: str | None = None
    if plots:
        for record in records:
            target = out / "plots" / _plot_filename(record.name)
            plot_run(record.name, record.summary, target)
            plot_paths[record.name] = target.relative_to(out).as_posix()
        plot_grid([(record.name, record.summary) for record in records], out / "grid.png")
        grid = "grid.png"
    markdown = render_markdown(rows, precursor_rates(records, difficulty),
                               size_correlations(records, layer=layer, grid_points=grid_points),
                               runs_dir=str(runs_dir), plots=plot_paths, grid=grid, difficulty=difficulty)
    (out / "report.md").write_text(markdown)
    write_csv(rows, out / "runs.csv")
    return {"markdown": out / "report.md", "csv": out / "runs.csv", "grid": out / grid if grid else None,
            "plots": [out / p for p in plot_paths.values()], "runs": len(records)}


def main(argv: Iterable[str] | None = None) -> dict[str, Any]:
    """``python -m study.record.report RUNS_DIR [--out DIR] [--layer NAME] [--difficulty D] [--no-plots]``."""
    parser = argparse.ArgumentParser(
        prog="python -m study.record.report",
        description="Tables and plots of a sweep from its runs' capgeo_summary.json files.",
    )
    parser.add_argument("runs_dir", help="folder of runs (searched recursively)")
    parser.add_argument("--out", default=None, help="output folder (default: RUNS_DIR/report)")
    parser.add_argument("--layer", default=None, help="layer for the size correlations (default: the deepest)")
    parser.add_argument("--difficulty", default="hard", help="difficulty of the precursor rates (default: hard)")
    parser.add_argument("--grid-points", type=int, default=101, help="grid of the curve correlation (default: 101)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    args = parser.parse_args(None if argv is None else list(argv))
    if args.grid_points < 2:
        parser.error(f"--grid-points must be at least 2, got {args.grid_points}")
    try:
        written = build_report(args.runs_dir, args.out, layer=args.layer, difficulty=args.difficulty,
                               grid_points=args.grid_points, plots=not args.no_plots)
    except FileNotFoundError as err:
        parser.error(str(err))
    print(f"{written['runs']} runs -> {written['markdown']}, {written['csv']}"
          + (f", {written['grid']} and {len(written['plots'])} run plots" if written["grid"] else ""))
    return written


if __name__ == "__main__":
    main()

