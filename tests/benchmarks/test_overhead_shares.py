"""The runs' own shares, folder by folder: read from the summaries as a run writes them, with a known answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.overhead_shares import line, main, read_set, table
from capgeo_callbacks.run.summary import write_summary


def overhead(share: float, rankme: float, commutator: float | None = None, run_cpu: float = 100.0) -> dict[str, Any]:
    """An overhead record as the budget writes it: whole-run CPU share, and per piece its CPU seconds."""
    work = {"detector": {"kind": "fixed", "cpu_seconds": 0.5, "due": 0, "runs": 0},
            "rankme": {"kind": "rule input", "cpu_seconds": rankme, "due": 10, "runs": 10}}
    if commutator is not None:
        work["CommutatorDefectMonitor"] = {"kind": "optional", "cpu_seconds": commutator, "due": 2, "runs": 2}
    return {"setting": "measure", "run_cpu_seconds": run_cpu, "capgeo_cpu_seconds": share * run_cpu,
            "shares": {"whole_run": {"cpu": share, "wall": share}, "after_start": {"cpu": share, "wall": share}},
            "work": work}


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    records = [overhead(0.10, 4.0, 5.0), overhead(0.30, 8.0, 20.0), overhead(0.20, 6.0)]
    for index, record in enumerate(records):
        write_summary({"parameters": 1_000_000 * (index + 1), "threads": 1, "overhead": record},
                      tmp_path / f"run{index}")
    write_summary({"parameters": 10}, tmp_path / "unbudgeted")  # no overhead record: left out, and counted
    return tmp_path


def test_a_folder_gives_its_runs_shares_and_each_pieces_part(runs: Path) -> None:
    found = read_set(runs)
    assert sorted(found.shares) == [0.10, 0.20, 0.30] and found.n == 3 and found.left_out == 1
    assert found.parameters == (1_000_000, 3_000_000) and found.settings == ["measure"]
    assert sorted(found.pieces["rankme"]) == [0.04, 0.06, 0.08]
    assert sorted(found.pieces["CommutatorDefectMonitor"]) == [0.05, 0.20]  # only the runs that ran it
    assert found.pieces["detector"] == [0.005] * 3


def test_the_line_and_the_table_say_n_median_and_largest(runs: Path) -> None:
    found = read_set(runs)
    said = line([found])
    assert f"on the 3 runs of `{runs}` (1.00-3.00M parameters, 1 thread, every point measured" in said
    assert "a median **20.0%**, the largest 30.0%; its largest part the commutator defect, a median 12.5%" in said
    assert "carrying RankMe (with ILDR on its rows) and the commutator defect" in said
    rows = table([found]).splitlines()
    assert rows[2] == f"| `{runs}` | 3 | measure | 20.0% | 30.0% | 6.0% | 12.5% | 0.5% |"
    assert rows[-1] == f"Runs without a share, left out: `{runs}`: 1."
    assert "paired whole runs that check the self-measured share are not made yet" in said


def test_a_set_made_in_pairs_says_what_its_pairs_measured(tmp_path: Path) -> None:
    from benchmarks.overhead_budget import row

    made = tmp_path / "sort-hard" / "0.03"
    summaries = [{"parameters": 400_000, "threads": 1, "overhead": overhead(share, 1.0, run_cpu=100.0)}
                 for share in (0.02, 0.03)]
    for index, summary in enumerate(summaries):
        write_summary(summary, made / f"pair-{index}")
    # the mean ratio 1.03, its interval t(0.975, 1) x 0.01414 / sqrt(2) = 0.127 either side; the runs predict
    # (100 + 2.5) / (100 + 0.5) = 1.020 at the median share: within it
    result = {"task": "sort", "difficulty": "hard", "rows": [row("0.03", [1.02, 1.04], summaries)]}
    (tmp_path / "sort-hard.json").write_text(json.dumps(result))
    found = read_set(made)
    assert found.paired is not None and found.paired.pairs == 2 and found.paired.agrees is True
    said = line([found, read_set(tmp_path / "sort-hard" / "0.03")])
    assert ("paired with 2 whole runs of sort/hard without the measures, it took 1.030 [0.903, 1.157] times their CPU "
            "time, where the runs' own records predict 1.020: they agree") in said
    assert "[paired whole runs check the self-measured share](docs/overhead.md" in said
    result["width"] = 0.02  # as the benchmark records the half-width it was asked for: this interval is wider
    (tmp_path / "sort-hard.json").write_text(json.dumps(result))
    assert "they agree (the interval is wider than the ±0.02 asked: more pairs are due)" in line([read_set(made)])


def test_a_folder_without_a_share_is_an_error_that_says_what_is_needed(tmp_path: Path) -> None:
    write_summary({"parameters": 10}, tmp_path / "run")
    with pytest.raises(ValueError, match="records capgeo's share"):
        read_set(tmp_path)
    with pytest.raises(ValueError, match="records capgeo's share"):
        main(["line", str(tmp_path)])
