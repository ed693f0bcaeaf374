"""Smoke tests of the benchmark scripts at their tiniest settings.

They check that each script runs and prints its ratio line, and assert on what does not depend on the
machine (values agree, HVP counts); never on timings.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest

from benchmarks import (
    commutator_cost,
    hessian_hvps,
    ildr_speed,
    llc_vs_devinterp,
    rankme_monitor,
    rankme_speed,
    task_throughput,
)


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


def test_ildr_speed_times_ildr_beside_rankme_on_the_same_rows(capsys: pytest.CaptureFixture[str]) -> None:
    [result] = ildr_speed.main(["--shapes", "96x24", "--classes", "5", "--repeats", "1"])
    assert result["shape"] == (96, 24) and result["ratio"] > 0
    assert result["ildr"] > 1  # the classes' centroids lie apart: well separated rows
    assert "ratio ILDR / RankMe" in capsys.readouterr().out


def test_commutator_cost_times_the_defect_beside_a_step_rankme_and_ildr(capsys: pytest.CaptureFixture[str]) -> None:
    [result] = commutator_cost.main(["--sizes", "xs", "--batch-sizes", "8", "--train-steps", "0", "--repeats", "1"])
    assert (result["size"], result["batch_size"]) == ("xs", 8)
    assert all(result[f"{name}_s"] > 0 for name in ("step", "defect", "finite", "rankme", "ildr"))
    # capgeo's transformer is smooth (GELU): the float64 finite form at eta = 1e-3 is near the small-step form, O(eta
    # |g|) apart (about 2% at initialisation, where the halves' gradient norms are near 17)
    assert result["defect"] > 0 and result["finite"] == pytest.approx(result["defect"], rel=0.05)
    assert "defect/step" in capsys.readouterr().out


def test_rankme_monitor_logs_rankme_of_the_captured_rows(capsys: pytest.CaptureFixture[str]) -> None:
    result = rankme_monitor.main(["--task", "mod", "--difficulty", "easy", "--train-steps", "0", "--repeats", "1"])
    assert result["layers"] == ["model.blocks.0", "model.blocks.1", "model.norm_f"]
    assert result["rel_diff"] == 0.0
    assert result["ratio"] > 0 and len(result["times"]["own"]) == 1  # the monitor's own time, clocked inside it
    assert len(result["times"]["own_alone"]) == 1 and result["with_ildr"] > 0  # RankMe's alone; and with ILDR
    assert any(tag.startswith("ildr/") for tag in result["logged"])  # ILDR's values checked against ildr() too
    assert "ratio monitor / mathematics" in capsys.readouterr().out


@pytest.mark.slow
def test_llc_vs_devinterp_agree(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("devinterp")
    results = llc_vs_devinterp.main(["--problems", "lsq-full", "transformer", "--lsq-draws", "200", "--repeats", "1",
                                     "--chains", "2", "--draws", "2", "--train-steps", "0"])
    lsq, transformer = results
    assert lsq["vectorized"] and not transformer["vectorized"]  # the default path: vmap for tiny models only
    assert abs(lsq["z"]) < 3  # same model, settings and seeds: the two agree within noise
    assert all(math.isfinite(v) for v in (*transformer["capgeo"], *transformer["devinterp"]))
    assert "time ratio devinterp / capgeo" in capsys.readouterr().out


@pytest.mark.slow
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


@pytest.mark.slow
def test_gpu_overhead_runs_on_the_cpu_as_a_smoke_test(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import gpu_overhead

    results = gpu_overhead.main(["--accelerator", "cpu", "--task", "mod", "--difficulty", "hard", "--sizes", "xs",
                                 "--fraction", "0.002", "--repeats", "1", "--budget", "300"])
    (pair,) = results["sizes"]["xs"]["pairs"]
    assert results["steps"] == 6 and pair["ratio"] == pair["measured"] / pair["none"] > 0
    assert "size xs: median ratio" in capsys.readouterr().out


@pytest.mark.slow
def test_overhead_budget_pairs_small_runs_with_each_setting_and_their_own_shares(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from benchmarks import overhead_budget, overhead_shares

    out = tmp_path / "mod.json"
    result = overhead_budget.main(["--task", "mod", "--difficulty", "hard", "--max-steps", "40", "--stop-at-step",
                                   "12", "--settings", "measure", "0.01", "--min-pairs", "1", "--max-pairs", "1",
                                   "--out", str(out)])
    assert "| measure |" in capsys.readouterr().out
    assert json.loads(out.read_text())["bare"] == result["bare"]
    # the runs are kept beside the result, and their shares re-scored from them are the ones the pairs report
    kept = overhead_shares.read_set(tmp_path / "mod" / "0.01")
    assert kept.n == 1 and kept.shares == result["rows"][1]["whole_run"] and kept.settings == ["0.01"]
    with pytest.raises(ValueError, match="records capgeo's share"):
        overhead_shares.read_set(tmp_path / "mod" / "none")  # the bare runs measure nothing
    # called again, it goes on from the whole pairs kept (here: none left to make), and refuses another level's runs
    again = ["--task", "mod", "--difficulty", "hard", "--max-steps", "40", "--stop-at-step", "12", "--settings",
             "measure", "0.01", "--min-pairs", "1", "--max-pairs", "1", "--out", str(out)]
    assert overhead_budget.main(again)["bare"] == result["bare"]
    assert "going on after the 1 pair(s) kept" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="is a run of mod/hard with task 'mod', not the 'copy' asked for 'none'"):
        overhead_budget.main([*again[:-2], "--task", "copy", "--out", str(out)])
    measure, tiny = result["rows"]
    assert (measure["setting"], tiny["setting"]) == ("measure", "0.01") and len(result["bare"]) == 1
    assert all(row["mean"] > 0 and math.isinf(row["half_width"]) and row["agrees"] is None for row in result["rows"])
    assert measure["thinned"] == [0] and measure["whole_run"][0] > 0 and measure["predicted"][0] > 1
    with pytest.raises(SystemExit, match="holds runs of '0.01', not asked for here"):
        overhead_budget.main([*again[:-7], "0.02", *again[-6:]])  # another setting under the same --out
    with pytest.raises(ValueError, match="overhead_budget must be"):
        overhead_budget.main(["--settings", "fast"])


@pytest.mark.slow
def test_schedule_cost_counts_the_passes_and_times_a_tiny_pair(capsys: pytest.CaptureFixture[str],
                                                                tmp_path: Path) -> None:
    from benchmarks import schedule_cost
    from capgeo_callbacks.run.summary import read_summary

    schedule_cost.main(["passes"])
    assert "makes 256 validation passes" in capsys.readouterr().out
    out = tmp_path / "schedule.json"
    command = ["time", "--task", "mod", "--difficulty", "hard", "--max-steps", "20", "--min-pairs", "1",
               "--max-pairs", "1", "--out", str(out)]
    result = schedule_cost.main(command)
    assert result["passes_added"] == 21 - 3 and len(result["ratios"]) == 1 and result["ratios"][0] > 0
    assert result["ratios"][0] == result["own"]["schedule"][0] / result["own"]["few"][0]
    assert "validation passes beyond the 3" in capsys.readouterr().out
    # each run kept beside the result, with its schedule; called again, it goes on from them (none left to make)
    assert read_summary(tmp_path / "schedule" / "few" / "pair-0.json.gz")["eval_points"] == 1
    assert schedule_cost.main(command)["own"] == result["own"]
    assert "going on after the 1 pair(s) kept" in capsys.readouterr().out
    assert schedule_cost.main(["report", str(out)])["ratios"] == result["ratios"]
    assert "18 validation passes beyond the 3" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="with max_steps 20, not the 30 asked"):
        schedule_cost.main([*command[:6], "30", *command[7:]])


def test_pairs_turn_the_order_and_give_an_interval() -> None:
    from benchmarks._pairs import interval, run_order

    mean, half = interval([1.0, 1.2])
    assert mean == pytest.approx(1.1) and half == pytest.approx(12.706 * 0.1414 / 1.4142, rel=1e-3)
    assert math.isinf(interval([1.0])[1])
    # over three rounds each of three runs is first, middle and last once; two alternate
    orders = [run_order(["none", "measure", "0.03"], pair) for pair in range(3)]
    assert all(sorted(order[place] for order in orders) == ["0.03", "measure", "none"] for place in range(3))
    assert [run_order(["a", "b"], pair) for pair in range(2)] == [["a", "b"], ["b", "a"]]


def test_pairs_made_over_several_calls_say_where_each_was_made() -> None:
    from benchmarks._pairs import calls_of, calls_text, with_call

    amd = {"commit": "ea04d064a9", "machine": {"cpu": "AMD EPYC"}}
    intel = {"commit": "a89e4a1b43", "machine": {"cpu": "Intel Xeon"}}
    # an earlier version's result holds one provenance: the call that made every kept pair
    calls = with_call(calls_of({"provenance": amd}, 5), 5, 7, intel)
    assert [call["pairs"] for call in calls] == [[0, 5], [5, 7]]
    assert calls_text(calls) == "pairs 1-5 on AMD EPYC at ea04d06; pairs 6-7 on Intel Xeon at a89e4a1"
    # going on after 6 kept pairs (a seventh was lost with its session): the calls are cut to the pairs kept
    assert [call["pairs"] for call in calls_of({"calls": calls}, 6)] == [[0, 5], [5, 6]]
    assert calls_text(with_call(calls_of({"calls": calls}, 5), 5, 6, amd)).endswith("pair 6 on AMD EPYC at ea04d06")
    assert calls_of({}, 0) == [] and with_call([], 3, 3, amd) == []  # a call that made no pair is not one


def test_overhead_tables_from_results_files(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from benchmarks import overhead

    def level(task: str, ratios: list[float]) -> dict:
        pairs = [{"first": "none", "none": 10.0, "measured": 10.0 * r, "ratio": r,
                  "components": {"RankMeMonitor": 0.1 * r, "figures": 0.05}} for r in ratios]
        return {"task": task, "difficulty": "easy", "steps": 20, "budget": 100, "evaluations": 10, "fraction": 0.2,
                "measures": "default", "pairs": pairs, "load_average": {"start": [1.0, 1, 1], "end": [2.0, 1, 1]},
                "finished": "2026-12-05T00:00:00+00:00",
                "provenance": {"commit": "abcdef0123", "uncommitted": [], "clock": "cpu", "threads": 1, "options": {},
                               "machine": {"cpu": "Some CPU", "cores": 2, "node": "vm"}, "torch": "2.13.0"}}

    for task, ratios in (("copy", [1.01, 1.05, 1.02]), ("mod", [1.04, 1.05, 1.00])):
        (tmp_path / f"{task}-easy.json").write_text(json.dumps(level(task, ratios)))
    overhead.main(["table", str(tmp_path)])
    out = capsys.readouterr().out
    assert "| copy | easy | 20 (100) | 10 | 10.0, 10.0, 10.0 | 10.1, 10.5, 10.2 | 1.010, 1.050, 1.020 | 1.020 |" in out
    assert "| mod | easy |" in out and "| **1.040** |" in out  # the median of the pairs' ratios, above 1.03 in bold
    assert "| 10.2 | 5.0 |" in out  # RankMe and figures, ms per evaluation (median over the measured runs)
    assert "Ratio <= 1.03 on **1 of 2** levels; median 1.030, largest 1.040 (mod easy)." in out
    assert "Some CPU, 2 cores" in out and "(vm)" not in out and "abcdef0" in out  # the host's name not on a page
    overhead.main(["line", str(tmp_path)])
    assert "1 of 2 at most 1.03" in capsys.readouterr().out
