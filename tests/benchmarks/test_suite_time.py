"""The suite's timing record: pytest's closing line read as pytest writes it, and the README's sentence from it."""

from __future__ import annotations

import pytest

from benchmarks.suite_time import closing_line, line, run_count, slowest


def test_pytest_closing_lines_are_read_with_their_counts_and_seconds() -> None:
    output = "....\n1 failed, 1652 passed, 4 xfailed, 339 warnings in 370.64s (0:06:10)\n"
    assert closing_line(output) == ("1 failed, 1652 passed, 4 xfailed, 339 warnings", 370.64)
    assert closing_line("== 1543 passed, 2 skipped, 9 deselected in 12.50s ==\n") == (
        "1543 passed, 2 skipped, 9 deselected", 12.5)
    assert run_count("1 failed, 1652 passed, 4 xfailed, 339 warnings") == 1657  # warnings are no tests
    assert run_count("1543 passed, 2 skipped, 9 deselected") == 1543
    with pytest.raises(ValueError, match="no closing line"):
        closing_line("collected 0 items\n")


def test_the_sentence_says_each_tier_within_or_over_its_target_with_its_failures() -> None:
    found = {"machine": "2-core CPU", "commit": "abc1234", "tiers": {
        "the whole suite": {"closing": "1 failed, 99 passed", "seconds": 370.6, "target": 360},
        "the quick tier": {"closing": "80 passed", "seconds": 60.2, "target": 90}}}
    assert line(found) == ("Timed alone on a 2-core CPU (nothing else in flight): the whole suite 371 s of pytest "
                           "(100 tests, 1 failed; over its target of 360 s), the quick tier 60 s of pytest "
                           "(80 tests; within its target of 90 s).")


def test_the_slowest_tests_are_read_from_pytests_durations() -> None:
    output = ("============================= slowest 30 durations =============================\n"
              "219.07s call     tests/study/test_record.py::test_the_record_is_regenerated\n"
              "12.50s setup    tests/examples/test_examples.py::test_own_model[case 1]\n"
              "0.01s teardown tests/test_train.py::test_x\n"
              "(3 durations < 0.005s hidden.  Use -vv to show these durations.)\n"
              "1 passed in 231.00s (0:03:51)\n")
    assert slowest(output) == [
        {"seconds": 219.07, "when": "call", "test": "tests/study/test_record.py::test_the_record_is_regenerated"},
        {"seconds": 12.5, "when": "setup", "test": "tests/examples/test_examples.py::test_own_model[case 1]"},
        {"seconds": 0.01, "when": "teardown", "test": "tests/test_train.py::test_x"}]
    assert slowest("1 passed in 1.00s\n") == []
