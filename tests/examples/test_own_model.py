"""examples/own_model.py end to end: a user's Llama-like causal LM on tuple batches, capgeo attached as the README
prints it; each test asserts one thing the example states."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.examples.helpers import (
    ExampleRun,
    check_acquired_late,
    check_forecast_before_acquisition,
    check_forecast_holds_acquisition,
    check_nothing_skipped,
    check_probe_accuracy,
    check_rankme_per_layer,
    check_rules_alert_or_say_why,
    load_example,
    run_example,
)

pytestmark = pytest.mark.slow
CHANCE = 1 / 23


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> ExampleRun:
    example = load_example("own_model")
    return run_example(example.main, root=Path(tmp_path_factory.mktemp("own_model")))


def test_the_model_acquires_the_task_late(run: ExampleRun) -> None:
    check_acquired_late(run, CHANCE, plateau_until=150)


def test_rankme_of_every_layer_at_every_evaluation(run: ExampleRun) -> None:
    check_rankme_per_layer(run, ["layers.0", "layers.1", "norm"])


def test_the_summary_records_the_run(run: ExampleRun) -> None:
    assert run.summary["monitor"] == "val/acc"
    assert {"val/loss", "train/loss", "lr"} <= set(run.summary["series"])
    assert (run.folder / "capgeo_summary.json").is_file()


def test_a_probe_on_the_final_norm_reads_the_answer(run: ExampleRun) -> None:
    check_probe_accuracy(run, "model.norm", start_below=0.2, end_above=0.8)  # one watched layer: its full name


def test_a_forecast_before_acquisition(run: ExampleRun) -> None:
    check_forecast_before_acquisition(run)


def test_the_forecast_s_interval_holds_the_acquisition_step(run: ExampleRun) -> None:
    check_forecast_holds_acquisition(run)


def test_every_rule_alerts_or_says_why_not(run: ExampleRun) -> None:
    check_rules_alert_or_say_why(run)


def test_nothing_is_skipped(run: ExampleRun) -> None:
    check_nothing_skipped(run)
