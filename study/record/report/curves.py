"""How well the smallest model's RankMe curve predicts each larger size's (Spearman over normalised progress)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from capgeo_callbacks.detection import spearman
from capgeo_callbacks.keys import layer_names
from capgeo_callbacks.run.reading import DIFFICULTY_ORDER, RunRecord
from study.record.report.rows import RANKME_PREFIX

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
    rows.sort(key=lambda r: (r["task"], DIFFICULTY_ORDER.get(r["difficulty"], 9), r["difficulty"],
                             r["large_parameters"]))
    return rows


