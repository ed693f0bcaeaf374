"""Smoke tests of the benchmark scripts at their tiniest settings.

They check that each script runs and prints its ratio line, and assert on what does not depend on the
machine (values agree, HVP counts); never on timings.
"""

from __future__ import annotations

import math
import warnings

import pytest

from benchmarks import hessian_hvps, llc_vs_devinterp, rankme_monitor, rankme_speed, task_throughput


@pytest.fixture(autouse=True)
def _quiet() -> None:
    warnings.simplefilter("ignore")


def test_rankme_speed_same_value_on_both_routes(capsys: pytest.CaptureFixture[str]) -> None:
    for kind in ("noisy", "lowrank"):
        results = rankme_speed.main(["--shapes", "96x24", "--repeats", "1", "--kind", kind])
        assert [r["shape"] for r in results] == [(96, 24), (24, 96)]
        assert {r["route"] for r in results} == ({"gram"} if kind == "noisy" else {"svd"})
        assert max(r["rel_diff"] for r in results) < 1e-9
        assert all(r["ratio"] > 0 for r in results)
    assert "speed-up over the best SVD" in capsys.readouterr().out


def test_rankme_monitor_logs_rankme_of_the_captured_rows(capsys: pytest.CaptureFixture[str]) -> None:
    result = rankme_monitor.main(["--task", "mod", "--difficulty", "easy", "--train-steps", "0", "--repeats", "1"])
    assert result["layers"] == ["model.blocks.0", "model.blocks.1", "model.norm_f"]
    assert result["rel_diff"] == 0.0
    assert result["ratio"] > 0
    assert "ratio monitor / floor" in capsys.readouterr().out


def test_llc_vs_devinterp_agree(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("devinterp")
    results = llc_vs_devinterp.main(["--problems", "lsq-full", "transformer", "--lsq-draws", "200", "--repeats", "1",
                                     "--chains", "2", "--draws", "2", "--train-steps", "0"])
    lsq, transformer = results
    assert lsq["vectorized"] and not transformer["vectorized"]  # the default path: vmap for tiny models only
    assert abs(lsq["z"]) < 3  # same model, settings and seeds: the two agree within noise
    assert all(math.isfinite(v) for v in (*transformer["capgeo"], *transformer["devinterp"]))
    assert "time ratio devinterp / capgeo" in capsys.readouterr().out


def test_hessian_hvps_counts(capsys: pytest.CaptureFixture[str]) -> None:
    quad_gap, quad_outlier, model = hessian_hvps.main([
        "--problems", "quadratic-gap", "quadratic-outlier", "transformer", "--max-power", "400",
        "--train-steps", "0", "--batch-size", "4", "--max-lanczos", "40", "--max-power-transformer", "40",
    ])
    assert quad_gap["lanczos_hvps"] * 3 < quad_gap["power_hvps"]  # a small gap: Lanczos far ahead
    assert quad_outlier["lanczos_hvps"] <= quad_outlier["power_hvps"]
    assert quad_gap["reference"] == 1.0 and quad_gap["ratio"] > 3
    assert model["dim"] == 414_976 and math.isfinite(model["reference"])
    assert model["lanczos_hvps"] is not None and model["lanczos_hvps"] <= 40
    assert "ratio power / Lanczos" in capsys.readouterr().out


def test_task_throughput(capsys: pytest.CaptureFixture[str]) -> None:
    results = task_throughput.main(["--tasks", "mod", "sort", "--difficulties", "easy", "--batches", "2",
                                    "--steps", "1", "--repeats", "1"])
    assert [(r["task"], r["difficulty"]) for r in results] == [("mod", "easy"), ("sort", "easy")]
    assert all(r["ratio"] > 0 and r["batch_size"] == 64 for r in results)
    assert "lowest ratio" in capsys.readouterr().out


def test_overhead_component_clock_counts_nested_time_once() -> None:
    from benchmarks.overhead import ComponentClock
    from capgeo_callbacks import RankMeMonitor

    ticks = iter(range(100))
    clock = ComponentClock(lambda: float(next(ticks)))
    inner = clock.wrap("inner", lambda: None)  # 1 tick
    outer = clock.wrap("outer", lambda: inner())  # 3 ticks in all, 1 of them inner's
    outer()
    assert dict(clock.seconds) == {"inner": 1.0, "outer": 2.0}
    hook = RankMeMonitor.on_validation_epoch_end
    with ComponentClock("cpu").installed():
        assert RankMeMonitor.on_validation_epoch_end is not hook
    assert RankMeMonitor.on_validation_epoch_end is hook  # restored
