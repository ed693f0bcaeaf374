"""study.record.report: tables, CSV, rates and curve correlations from hand-made summaries, plus one
real sweep of two tiny train.py runs read back by the report."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import spearmanr

from capgeo_callbacks.detection import spearman
from capgeo_callbacks.run.reading import find_runs
from capgeo_callbacks.run.summary import SUMMARY_FILENAME
from study.record import report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LAYERS_XS = ("blocks.0", "blocks.1", "norm_f")


def make_summary(
    task: str = "sort", difficulty: str = "hard", size: str = "xs", parameters: int = 414_976, seed: int = 0,
    max_steps: int = 1000, steps: int | None = None, eval_steps: list[int] | None = None,
    rankme: dict[str, list[float]] | None = None, acc: list[float] | None = None,
    verdict: str = "not-acquired", gap: int | None = None, acquisition_step: int | None = None,
    floors: dict[str, float | None] | None = None, measures: dict[str, bool | None] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A summary shaped like PrecursorDetector's, with only the fields the report reads."""
    eval_steps = eval_steps or list(range(100, max_steps + 1, 100))
    n = len(eval_steps)
    rankme = rankme or {name: [20.0 - i + 0.5 * k for i in range(n)] for k, name in enumerate(LAYERS_XS)}
    acc = acc if acc is not None else [min(1.0, i / n) for i in range(n)]
    floors = floors or {}
    layers = {name: {"collapse_step": None if floors.get(name) is None else eval_steps[1],
                     "floor": floors.get(name), "min_rankme": min(values), "verdict": verdict, "gap": gap}
              for name, values in rankme.items()}
    series: dict[str, Any] = {"acc": [[s, a] for s, a in zip(eval_steps, acc, strict=True)]}
    series.update({f"rankme/{name}": [[s, v] for s, v in zip(eval_steps, values, strict=True)]
                   for name, values in rankme.items()})
    kinds = {"rankme": "collapse", "probe_acc": "crossing"}
    return {
        "task": task, "difficulty": difficulty, "size": size, "seed": seed, "parameters": parameters,
        "max_steps": max_steps, "steps": max_steps if steps is None else steps, "monitor": "val/acc",
        "acquisition_step": acquisition_step, "verdict": verdict, "gap": gap, "verdict_layer": None,
        "layers": layers, "layer_order_rho": None, "logprob_emergence_step": None, "acc_at_logprob_emergence": None,
        "measures": {tag: {"kind": kinds.get(tag.split("/")[0], "change"), "transition_step": None,
                           "precedes_acquisition": value} for tag, value in (measures or {}).items()},
        "series": series, **extra,
    }


def write_run(runs_dir: Path, name: str, summary: dict[str, Any], version: int = 0) -> Path:
    path = runs_dir / name / f"version_{version}" / SUMMARY_FILENAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary))
    return path


def md_row(markdown: str, run: str) -> list[str]:
    """The cells of the runs-table line for ``run``."""
    line = next(line for line in markdown.splitlines() if line.startswith(f"| {run} |"))
    return [cell.strip() for cell in line.strip().strip("|").split(" | ")]


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    """Three hard sort runs (two sizes, one not acquired) and one easy run, with known values."""
    root = tmp_path / "runs"
    write_run(root, "sort-hard-xs-s0", make_summary(
        verdict="precursor", gap=400, acquisition_step=600, floors={"blocks.0": 2.5, "norm_f": 3.25},
        layer_order_rho=-1.0, logprob_emergence_step=300, acc_at_logprob_emergence=0.1,
        measures={"rankme/blocks.0": True, "rankme/norm_f": False, "probe_acc/norm_f": True, "llc": False}))
    write_run(root, "sort-hard-s-s0", make_summary(
        size="s", parameters=1_800_000, verdict="not-acquired",
        measures={"rankme/blocks.0": None, "rankme/norm_f": None, "llc": None}))
    write_run(root, "sort-easy-xs-s0", make_summary(
        difficulty="easy", verdict="no-collapse", acquisition_step=200, measures={"rankme/norm_f": True}))
    return root


def test_runs_table_cells(runs_dir: Path) -> None:
    records = find_runs(runs_dir)
    # display order: task, difficulty (easy before hard), then size by parameters
    assert [r.name for r in records] == ["sort-easy-xs-s0", "sort-hard-xs-s0", "sort-hard-s-s0"]
    rows = [report.run_row(r) for r in records]
    markdown = report.render_markdown(rows, [], [], plots={"sort-hard-xs-s0": "plots/x.png"})
    assert md_row(markdown, "sort-hard-xs-s0") == [
        "sort-hard-xs-s0", "sort", "hard", "xs", "414,976", "1000", "precursor", "400", "600", "300 (acc 0.10)",
        "blocks.0 2.50; blocks.1 —; norm_f 3.25", "-1.000", "[png](plots/x.png)"]
    # not acquired, no collapse, no plot: dashes, no crash
    assert md_row(markdown, "sort-hard-s-s0") == [
        "sort-hard-s-s0", "sort", "hard", "s", "1,800,000", "1000", "not-acquired", "—", "—", "—", "—", "—", "—"]


def test_csv_has_one_row_per_run_and_empty_missing_cells(runs_dir: Path, tmp_path: Path) -> None:
    rows = [report.run_row(r) for r in find_runs(runs_dir)]
    path = report.write_csv(rows, tmp_path / "runs.csv")
    with path.open() as handle:
        table = {row["run"]: row for row in csv.DictReader(handle)}
    assert set(table) == {"sort-easy-xs-s0", "sort-hard-xs-s0", "sort-hard-s-s0"}
    hard = table["sort-hard-xs-s0"]
    assert (hard["parameters"], hard["verdict"], hard["gap"], hard["acquisition_step"]) == ("414976", "precursor",
                                                                                             "400", "600")
    assert (hard["floor/blocks.0"], hard["floor/blocks.1"], hard["floor/norm_f"]) == ("2.5", "", "3.25")
    assert hard["precedes/rankme/blocks.0"] == "True" and hard["precedes/llc"] == "False"
    assert table["sort-hard-s-s0"]["gap"] == "" and table["sort-hard-s-s0"]["precedes/llc"] == ""
    assert table["sort-easy-xs-s0"]["precedes/llc"] == ""  # a measure this run did not have


def test_precursor_rate_on_hard_runs(runs_dir: Path) -> None:
    rates = {r["measure"]: r for r in report.precursor_rates(find_runs(runs_dir))}
    order = [r["measure"] for r in report.precursor_rates(find_runs(runs_dir))]
    assert order == ["RankMe verdict", "rankme/* (any layer)", "rankme/blocks.0", "rankme/norm_f",
                     "probe_acc/* (any layer)", "probe_acc/norm_f", "llc"]

    def counts(measure: str) -> tuple[Any, ...]:
        r = rates[measure]
        return r["runs"], r["acquired"], r["preceded"], r["rate"], r["rate_acquired"]

    # two hard runs; the easy run (whose rankme/norm_f preceded) is not counted
    assert counts("RankMe verdict") == (2, 1, 1, 0.5, 1.0)
    assert counts("rankme/* (any layer)") == (2, 1, 1, 0.5, 1.0)
    assert counts("rankme/norm_f") == (2, 1, 0, 0.0, 0.0)
    assert counts("probe_acc/norm_f") == (1, 1, 1, 1.0, 1.0)
    assert counts("llc") == (2, 1, 0, 0.0, 0.0)
    easy = {r["measure"]: r for r in report.precursor_rates(find_runs(runs_dir), difficulty="easy")}
    assert easy["rankme/norm_f"]["preceded"] == 1 and easy["RankMe verdict"]["preceded"] == 0
    assert report.precursor_rates(find_runs(runs_dir), difficulty="medium") == []


def _independent_rho(curves_small: list[tuple[np.ndarray, np.ndarray]],
                     curves_large: list[tuple[np.ndarray, np.ndarray]], points: int = 101) -> float:
    lo = max(x[0] for x, _ in curves_small + curves_large)
    hi = min(x[-1] for x, _ in curves_small + curves_large)
    grid = np.linspace(lo, hi, points)
    small = np.mean([np.interp(grid, x, y) for x, y in curves_small], axis=0)
    large = np.mean([np.interp(grid, x, y) for x, y in curves_large], axis=0)
    return float(spearmanr(small, large).statistic)


def test_size_correlation_matches_scipy_on_interpolated_curves(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    root = tmp_path / "runs"
    # different budgets and evaluation grids, so only normalised progress lines them up
    small_steps, large_steps = list(range(10, 501, 10)), list(range(40, 2001, 40))
    small = 30 - 20 * np.exp(-((np.array(small_steps) / 500 - 0.3) ** 2) / 0.01) + rng.normal(0, 1, 50)
    large = [30 - 18 * np.exp(-((np.array(large_steps) / 2000 - 0.35) ** 2) / 0.02) + rng.normal(0, 1, 50)
             for _ in range(2)]
    # the 'big' name sorts before 'xs' but has more parameters: order must come from parameters
    write_run(root, "mod-hard-xs-s0", make_summary(task="mod", max_steps=500, eval_steps=small_steps,
                                                   rankme={"blocks.0": list(rng.normal(9, 1, 50)),
                                                           "norm_f": small.tolist()}, acc=[0.0] * 50))
    for seed in range(2):
        write_run(root, f"mod-hard-big-s{seed}", make_summary(
            task="mod", size="big", seed=seed, parameters=5_000_000, max_steps=2000, eval_steps=large_steps,
            rankme={"blocks.0": [1.0] * 50, "blocks.3": [2.0] * 50, "norm_f": large[seed].tolist()},
            acc=[0.0] * 50))
    rows = report.size_correlations(find_runs(root))
    assert len(rows) == 1
    row = rows[0]
    assert (row["small_size"], row["large_size"], row["small_seeds"], row["large_seeds"]) == ("xs", "big", 1, 2)
    assert row["layer"] == "norm_f"  # the deepest watched layer of both sizes
    x_small, x_large = np.array(small_steps) / 500, np.array(large_steps) / 2000
    expected = _independent_rho([(x_small, small)], [(x_large, large[0]), (x_large, large[1])])
    assert row["rho"] == pytest.approx(expected, abs=1e-12)
    assert 0.5 < row["rho"] <= 1.0
    # a named layer both sizes have; a constant curve has no rank correlation
    named = report.size_correlations(find_runs(root), layer="blocks.0")
    assert named[0]["layer"] == "blocks.0" and named[0]["rho"] is None
    assert report.size_correlations(find_runs(root), layer="blocks.3") == []  # the small size lacks it
    markdown = report.render_markdown([], [], rows + named)
    assert f"| mod | hard | xs (414,976, 1) | big (5,000,000, 2) | norm_f | {row['rho']:.3f} |" in markdown
    assert "| blocks.0 | — |" in markdown


def test_curve_edge_cases() -> None:
    assert report.rankme_curve({"series": {"rankme/a": [[5, 1.0]]}, "layers": {"a": {}}, "max_steps": 10}) is None
    assert report.rankme_curve({"series": {}, "layers": {}}) is None
    x, y, name = report.rankme_curve(
        {"series": {"rankme/a": [[10, 2.0], [5, 1.0], [15, None]]}, "layers": {"a": {}}, "steps": 20})
    assert name == "a" and x.tolist() == [0.25, 0.5] and y.tolist() == [1.0, 2.0]
    disjoint = report.curve_correlation([(np.array([0.0, 0.4]), np.array([1.0, 2.0]))],
                                        [(np.array([0.5, 1.0]), np.array([1.0, 2.0]))])
    assert disjoint == (None, 0)
    with pytest.raises(ValueError, match="grid_points"):
        report.curve_correlation([(np.array([0.0, 1.0]), np.array([1.0, 2.0]))] * 2, [], grid_points=1)


def test_spearman_matches_scipy_with_ties() -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(0, 5, 40).astype(float)
    y = x + rng.normal(0, 2, 40)
    assert spearman(x.tolist(), y.tolist()) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
    assert spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None
    assert spearman([1.0], [2.0]) is None
    with pytest.raises(ValueError, match="finite"):
        spearman([1.0, math.nan], [1.0, 2.0])


def _assert_png(path: Path) -> None:
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_MAGIC
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 300


def test_build_report_writes_markdown_csv_and_valid_pngs(
    runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    written = report.main([str(runs_dir), "--out", str(tmp_path / "out")])
    assert "3 runs ->" in capsys.readouterr().out
    assert written["runs"] == 3 and written["markdown"].exists() and written["csv"].exists()
    assert len(written["plots"]) == 3
    for path in [written["grid"], *written["plots"]]:
        _assert_png(path)
    markdown = written["markdown"].read_text()
    assert "![all runs](grid.png)" in markdown and "[png](plots/sort-hard-xs-s0.png)" in markdown
    assert "| RankMe verdict | 2 | 1 | 1 | 0.50 | 1.00 |" in markdown
    default = report.build_report(runs_dir, plots=False)  # default --out is RUNS_DIR/report
    assert default["markdown"] == runs_dir / "report" / "report.md" and default["grid"] is None


def test_cli_errors_on_a_folder_without_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        report.main([str(tmp_path)])
    assert "no capgeo_summary.json" in capsys.readouterr().err


@pytest.mark.slow
def test_sweep_then_report_end_to_end(local_ray: None, tmp_path: Path) -> None:
    import sweep

    logdir = tmp_path / "sweep"
    results = sweep.main(["--tasks", "sort", "--difficulties", "easy", "--sizes", "xs", "--seeds", "0", "1",
                          "--logdir", str(logdir), "--jobs", "2", "--threads", "1",
                          "--extra-args", "--max-steps", "16", "--eval-points", "4", "--measures", "rankme"])
    assert sorted((outcome.trial.name, outcome.action) for outcome in results) == [
        ("sort-easy-xs-s0", "done"), ("sort-easy-xs-s1", "done")]
    written = report.build_report(logdir)
    with written["csv"].open() as handle:
        table = {row["run"]: row for row in csv.DictReader(handle)}
    assert set(table) == {"sort-easy-xs-s0", "sort-easy-xs-s1"}
    assert all(row["steps"] == "16" and row["parameters"] == "414976" for row in table.values())
    markdown = written["markdown"].read_text()
    for run in table:
        cells = md_row(markdown, run)
        assert cells[:6] == [run, "sort", "easy", "xs", "414,976", "16"]
        assert cells[6] in {"precursor", "simultaneous", "no-collapse", "not-acquired"}
    for path in [written["grid"], *written["plots"]]:
        _assert_png(path)
