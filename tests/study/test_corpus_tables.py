"""The corpus page's cost and provenance tables on rows whose answers are known."""

from __future__ import annotations

from study.phases.corpus import cost_table, provenance_table


def row(phase: str, run: str, cpu: float | None, machine: str = "vm (cpu)", **extra: object) -> dict:
    return {"phase": phase, "run": run, "cpu_seconds": cpu, "machine": machine, "copy_of": None, "partial_cost": None,
            "resumes": None, "accelerator": None, "torch": "2.13.0+cpu", "commit": "a" * 40,
            "uncommitted_changes": False, "threads": None, **extra}


def test_a_copy_of_a_calibration_run_is_counted_once_and_a_short_total_says_so() -> None:
    rows = [row("calibration", "copy-s0", 3600.0, "gpu box"), row("hard", "copy-s0", 3600.0, "gpu box",
                                                                  copy_of="calibration/copy/copy-s0"),
            row("heldout", "add-s102", 1800.0, partial_cost="a commit message"), row("levels", "r", None)]
    table = cost_table(rows)
    assert "| hard | gpu box | 1 | 1 | 0.00 |" in table
    assert "| heldout | vm (cpu) | 1 | 0 | 0.50 (at least: 1 run incomplete) |" in table
    assert "| all | | 4 | 1 | 1.50 (at least: 2 runs incomplete) |" in table
    assert "3 distinct runs, 1.5 CPU-hours at least" in table
    assert "heldout/add-s102 (resumed before CPU time was carried" in table and "levels/r (no `cpu_seconds`" in table


def test_provenance_groups_runs_by_where_they_ran() -> None:
    rows = [row("calibration", "a", 1.0, "gpu box", uncommitted_changes=True),
            row("calibration", "b", 1.0, "gpu box", uncommitted_changes=True),
            row("heldout", "c", 1.0, accelerator="cpu (x86_64)", threads=1)]
    table = provenance_table(rows).splitlines()
    assert table[2] == "| calibration | 2 | gpu box | not recorded | 2.13.0+cpu | `aaaaaaaa` | yes | not recorded |"
    assert table[3] == "| heldout | 1 | vm (cpu) | cpu (x86_64) | 2.13.0+cpu | `aaaaaaaa` | no | 1 |"
