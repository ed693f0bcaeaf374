"""Sweep report
============

The study's tables and plots from a folder of finished runs (docs/design.md, "Reports"), read from the runs'
``capgeo_summary.json`` files only, so it works for any Lightning module the callbacks watched::

    python -m capgeo_callbacks.report runs/sweep            # writes runs/sweep/report/
    python -m capgeo_callbacks.report runs/sweep --out out --layer norm_f

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
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from capgeo_callbacks.detection import spearman
from capgeo_callbacks.figures import plot_grid, plot_run
from capgeo_callbacks.summary import SUMMARY_FILENAME, layer_names, read_summary

__all__ = [
    "RunRecord",
    "build_report",
    "curve_correlation",
    "find_runs",
    "fmt",
    "layer_names",
    "main",
    "plot_grid",
    "plot_run",
    "precursor_rates",
    "rankme_curve",
    "render_markdown",
    "run_row",
    "size_correlations",
    "write_csv",
]

log = logging.getLogger("capgeo.report")


MISSING = "—"
RANKME_PREFIX = "rankme/"
# Display order of capgeo's difficulty names (any other name sorts after them, alphabetically).
_DIFFICULTY_ORDER = {"easy": 0, "medium": 1, "hard": 2}
_VERSION = re.compile(r"version_(\d+)")
CSV_COLUMNS = (
    "run", "version", "task", "difficulty", "size", "seed", "parameters", "steps", "max_steps", "verdict",
    "verdict_layer", "gap", "acquisition_step", "logprob_emergence_step", "acc_at_logprob_emergence",
    "layer_order_rho", "summary_path",
)


@dataclass(frozen=True)
class RunRecord:
    """One run's summary and where it was found.

    Attributes:
        name: the run folder (above ``version_*``), relative to the runs folder, with ``/`` separators.
        version: the ``version_*`` folder the summary is in, or None if it sits in the run folder itself.
        path: the summary file.
        summary: its parsed contents.
    """

    name: str
    version: str | None
    path: Path
    summary: dict[str, Any]


# ----------------------------------------------------------------------------------------------- loading


def find_runs(runs_dir: str | Path, filename: str = SUMMARY_FILENAME) -> list[RunRecord]:
    """Every run under ``runs_dir`` with a summary, one record per run, sorted for display.

    When a run folder has several ``version_*`` folders with a summary, the newest (highest number) wins.
    A gzipped summary (``capgeo_summary.json.gz``, how a corpus is committed) counts as one. A summary that is
    not valid JSON is skipped with a warning.

    Args:
        runs_dir: the folder to search (recursively).
        filename: the summary's file name.

    Raises:
        FileNotFoundError: if ``runs_dir`` is not a folder.
    """
    root = Path(runs_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"runs folder {str(root)!r} does not exist or is not a folder")
    newest: dict[str, tuple[int, RunRecord]] = {}
    for path in sorted([*root.rglob(filename), *root.rglob(filename + ".gz")]):
        match = _VERSION.fullmatch(path.parent.name)
        run_root = path.parent.parent if match else path.parent
        number = int(match.group(1)) if match else -1
        relative = run_root.relative_to(root).as_posix()
        name = run_root.name if relative == "." else relative
        if name in newest and newest[name][0] > number:
            continue
        try:
            summary = read_summary(path)
        except (OSError, ValueError) as err:
            log.warning("skipping %s: not a readable summary (%s)", path, err)
            continue
        if not isinstance(summary, dict):
            log.warning("skipping %s: not a summary (a JSON object was expected)", path)
            continue
        newest[name] = (number, RunRecord(name, path.parent.name if match else None, path, summary))
    return sorted((record for _, record in newest.values()), key=_sort_key)


def _sort_key(record: RunRecord) -> tuple[Any, ...]:
    s = record.summary
    difficulty = str(s.get("difficulty") or "")
    parameters = s.get("parameters")
    return (str(s.get("task") or ""), _DIFFICULTY_ORDER.get(difficulty, len(_DIFFICULTY_ORDER)), difficulty,
            parameters if isinstance(parameters, (int, float)) else math.inf, _seed_key(s.get("seed")), record.name)


def _seed_key(seed: Any) -> float:
    return float(seed) if isinstance(seed, (int, float)) else math.inf


# ------------------------------------------------------------------------------------------------- rows


def run_row(record: RunRecord) -> dict[str, Any]:
    """One run's table row: the fields of :data:`CSV_COLUMNS` (None where missing) plus per-layer dicts.

    Extra keys: ``floors`` (collapse floor per layer: the minimum RankMe from the peak of its whole-series
    collapse, None if the layer never collapsed), ``collapse_steps`` and ``min_rankme`` per layer, and
    ``precedes`` (per measure tag, whether its transition preceded acquisition; None if not acquired).
    """
    s = record.summary
    layers: Mapping[str, Mapping[str, Any]] = s.get("layers", {}) or {}
    names = layer_names(s)
    row: dict[str, Any] = {
        "run": record.name,
        "version": record.version,
        "task": s.get("task"),
        "difficulty": s.get("difficulty"),
        "size": s.get("size"),
        "seed": s.get("seed"),
        "parameters": s.get("parameters"),
        "steps": s.get("steps"),
        "max_steps": s.get("max_steps"),
        "verdict": s.get("verdict"),
        "verdict_layer": s.get("verdict_layer"),
        "gap": s.get("gap"),
        "acquisition_step": s.get("acquisition_step"),
        "logprob_emergence_step": s.get("logprob_emergence_step"),
        "acc_at_logprob_emergence": s.get("acc_at_logprob_emergence"),
        "layer_order_rho": s.get("layer_order_rho"),
        "summary_path": str(record.path),
    }
    row["floors"] = {name: (layers.get(name) or {}).get("floor") for name in names}
    row["collapse_steps"] = {name: (layers.get(name) or {}).get("collapse_step") for name in names}
    row["min_rankme"] = {name: (layers.get(name) or {}).get("min_rankme") for name in names}
    row["precedes"] = {tag: (info or {}).get("precedes_acquisition")
                       for tag, info in (s.get("measures", {}) or {}).items()}
    return row


def precursor_rates(records: Sequence[RunRecord], difficulty: str = "hard") -> list[dict[str, Any]]:
    """Per measure, how often its transition preceded acquisition, over the runs at ``difficulty``.

    Rows, in order:

    - ``RankMe verdict``: a run counts when its verdict is ``precursor`` (collapse *and* recovery before
      acquisition, docs/design.md), the headline measure;
    - per measure family with a tag per layer (``rankme/*``, ``probe_acc/*``): a run counts when any
      layer's transition preceded acquisition (``measures[tag]["precedes_acquisition"]``: the transition
      lies more than ``window`` evaluations before it; for RankMe this needs no recovery, so it is looser
      than the verdict), followed by one row per tag;
    - other measures (``grad_erank``, ``hessian/eig_0``, ``llc``, ...): one row per tag.

    Each row: ``measure``, ``runs`` (runs at that difficulty that measured it), ``acquired`` (of those,
    runs that acquired), ``preceded``, ``rate`` (= preceded / runs, the study's rate over all hard runs)
    and ``rate_acquired`` (= preceded / acquired). A rate with no runs is None.

    Args:
        records: the runs.
        difficulty: the difficulty to count ("hard": the study's precursor rate).
    """
    chosen = [r.summary for r in records if r.summary.get("difficulty") == difficulty]
    counts: dict[str, list[int]] = {}  # measure -> [runs, acquired, preceded]

    def count(measure: str, acquired: bool, preceded: bool) -> None:
        tally = counts.setdefault(measure, [0, 0, 0])
        tally[0] += 1
        tally[1] += int(acquired)
        tally[2] += int(preceded)

    order: list[str] = ["RankMe verdict"]
    families: dict[str, list[str]] = {}
    for s in chosen:
        if "verdict" in s:
            count("RankMe verdict", s.get("acquisition_step") is not None, s.get("verdict") == "precursor")
        layers = set(layer_names(s))
        by_family: dict[str, list[Mapping[str, Any]]] = {}
        for tag, info in (s.get("measures", {}) or {}).items():
            info = info or {}
            prefix, _, rest = tag.partition("/")
            family = f"{prefix}/*" if rest in layers else None
            if family is not None:
                by_family.setdefault(family, []).append(info)
                families.setdefault(family, [])
                if tag not in families[family]:
                    families[family].append(tag)
            elif tag not in order:
                order.append(tag)
            count(tag, info.get("precedes_acquisition") is not None, info.get("precedes_acquisition") is True)
        for family, infos in by_family.items():
            count(f"{family} (any layer)", any(i.get("precedes_acquisition") is not None for i in infos),
                  any(i.get("precedes_acquisition") is True for i in infos))
    measures = order[:1] + [m for family, tags in families.items() for m in (f"{family} (any layer)", *tags)]
    measures += order[1:]
    rows = []
    for measure in measures:
        if measure not in counts:
            continue
        runs, acquired, preceded = counts[measure]
        rows.append({"measure": measure, "runs": runs, "acquired": acquired, "preceded": preceded,
                     "rate": preceded / runs if runs else None,
                     "rate_acquired": preceded / acquired if acquired else None})
    return rows


# --------------------------------------------------------------------------------------- correlations


def rankme_curve(summary: Mapping[str, Any], layer: str | None = None) -> tuple[np.ndarray, np.ndarray, str] | None:
    """A run's RankMe curve against normalised training progress (step / max_steps).

    Args:
        summary: the run's summary.
        layer: the layer; None for the deepest watched (the last in watch order).

    Returns:
        (progress, rankme, layer) with finite values only, sorted by progress, or None when the layer
        has fewer than 2 points or the run's step budget is unknown.
    """
    names = layer_names(summary)
    if not names:
        return None
    name = names[-1] if layer is None else layer
    points = (summary.get("series", {}) or {}).get(RANKME_PREFIX + name) or []
    budget = summary.get("max_steps") or summary.get("steps")
    pairs = [(float(p[0]), float(p[1])) for p in points
             if p[1] is not None and math.isfinite(float(p[1]))]
    if len(pairs) < 2 or not isinstance(budget, (int, float)) or budget <= 0:
        return None
    pairs.sort()
    x = np.array([p[0] for p in pairs]) / float(budget)
    y = np.array([p[1] for p in pairs])
    return x, y, name


def curve_correlation(
    curves_a: Sequence[tuple[np.ndarray, np.ndarray]], curves_b: Sequence[tuple[np.ndarray, np.ndarray]],
    grid_points: int = 101,
) -> tuple[float | None, int]:
    """Spearman rho between two sets of curves, each averaged over its members on a common grid.

    The grid spans the progress range every curve covers (the latest first point to the earliest last
    point), in ``grid_points`` even steps; each curve is linearly interpolated onto it (``np.interp``) and
    a set's curves (seeds) are averaged pointwise before ranking.

    Args:
        curves_a: (progress, value) curves of the first set (e.g. the smallest size, one per seed).
        curves_b: the same for the second set.
        grid_points: number of grid points, >= 2.

    Returns:
        (rho, grid points used); rho is None when the curves do not overlap or one is constant.

    Raises:
        ValueError: if ``grid_points`` < 2 or a set is empty.
    """
    if grid_points < 2:
        raise ValueError(f"grid_points must be at least 2, got {grid_points}")
    if not curves_a or not curves_b:
        raise ValueError("curve_correlation needs at least one curve on each side")
    curves = [*curves_a, *curves_b]
    lo = max(float(x[0]) for x, _ in curves)
    hi = min(float(x[-1]) for x, _ in curves)
    if not hi > lo:
        return None, 0
    grid = np.linspace(lo, hi, grid_points)
    mean_a = np.mean([np.interp(grid, x, y) for x, y in curves_a], axis=0)
    mean_b = np.mean([np.interp(grid, x, y) for x, y in curves_b], axis=0)
    return spearman(mean_a.tolist(), mean_b.tolist()), grid_points


def size_correlations(
    records: Sequence[RunRecord], layer: str | None = None, grid_points: int = 101
) -> list[dict[str, Any]]:
    """How well the smallest model's RankMe curve predicts each larger size's, per task and difficulty.

    For each (task, difficulty), sizes are ordered by their ``parameters``; the smallest size's curve is
    compared with every larger size's by Spearman rank correlation (:func:`curve_correlation`) over
    normalised progress, step / max_steps, so runs with different budgets line up. Seeds of one size are
    averaged on the grid.

    The layer compared is, by default, each run's deepest watched layer (the last watched: the final norm
    for capgeo's models): sizes have different numbers of blocks, so ``blocks.1`` is not the same relative
    depth in a 2-block and a 12-block model, while the final representation plays the same role in every
    size (and is the layer the study measured). ``layer`` names one layer instead (runs without it are
    left out).

    Returns:
        Rows with ``task``, ``difficulty``, ``small_size``, ``small_parameters``, ``small_seeds``,
        ``large_size``, ``large_parameters``, ``large_seeds``, ``layer`` and ``rho`` (None if undefined),
        ``grid_points``.
    """
    groups: dict[tuple[str, str], dict[str, list[tuple[RunRecord, tuple[np.ndarray, np.ndarray, str]]]]] = {}
    for record in records:
        s = record.summary
        if s.get("task") is None or s.get("difficulty") is None or not isinstance(s.get("parameters"), int):
            continue
        curve = rankme_curve(s, layer)
        if curve is None:
            continue
        size = str(s.get("size") if s.get("size") is not None else s["parameters"])
        groups.setdefault((str(s["task"]), str(s["difficulty"])), {}).setdefault(size, []).append((record, curve))
    rows: list[dict[str, Any]] = []
    for (task, difficulty), by_size in groups.items():
        ordered = sorted(by_size.items(), key=lambda item: min(r.summary["parameters"] for r, _ in item[1]))
        if len(ordered) < 2:
            continue
        small_size, small_runs = ordered[0]
        for large_size, large_runs in ordered[1:]:
            rho, used = curve_correlation([c[:2] for _, c in small_runs], [c[:2] for _, c in large_runs],
                                          grid_points=grid_points)
            small_layers = sorted({c[2] for _, c in small_runs})
            large_layers = sorted({c[2] for _, c in large_runs})
            shown = small_layers if small_layers == large_layers else [*small_layers, "/", *large_layers]
            rows.append({
                "task": task, "difficulty": difficulty,
                "small_size": small_size, "small_parameters": small_runs[0][0].summary["parameters"],
                "small_seeds": len(small_runs),
                "large_size": large_size, "large_parameters": large_runs[0][0].summary["parameters"],
                "large_seeds": len(large_runs),
                "layer": " ".join(shown), "rho": rho, "grid_points": used,
            })
    rows.sort(key=lambda r: (r["task"], _DIFFICULTY_ORDER.get(r["difficulty"], 9), r["difficulty"],
                             r["large_parameters"]))
    return rows


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
    """``python -m capgeo_callbacks.report RUNS_DIR [--out DIR] [--layer NAME] [--difficulty D] [--no-plots]``."""
    parser = argparse.ArgumentParser(
        prog="python -m capgeo_callbacks.report",
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
