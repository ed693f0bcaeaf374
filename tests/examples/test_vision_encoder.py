"""examples/vision_encoder.py end to end: a small ViT classifying synthetic images, tuple batches with (B,)
labels; each test asserts one thing the example states, and a strict xfail says what an honest forecaster measurably
cannot do on this run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.examples.helpers import (
    ExampleRun,
    check_acquired_late,
    check_alert_before_acquisition,
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
NO_SIGN_BY_75_PERCENT = pytest.mark.xfail(
    strict=True, raises=AssertionError, reason="measured, not a gap: top-1 sits at chance (0.18 at step 68, 0.21 at "
    "78) and val/loss at its plateau (1.63 at 68) until step 78, then jumps (0.44 at 82, 0.82 at 96): nothing in "
    "val/acc or val/loss says acquisition (92) is coming by 75% of the time to it (step 69); acc-trend's first "
    "forecast is at step 85. The probe-crossing warning, which reads the features, does (test above)")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> ExampleRun:
    example = load_example("vision_encoder")
    return run_example(example.main, root=Path(tmp_path_factory.mktemp("vision")))


def test_the_model_acquires_the_task_late(run: ExampleRun) -> None:
    check_acquired_late(run, 1 / 5, plateau_until=60)


def test_rankme_of_the_pooled_features_at_every_evaluation(run: ExampleRun) -> None:
    check_rankme_per_layer(run, ["blocks.0", "blocks.1", "norm"])
    assert run.summary["selectors"]["rankme"] == "mean"


def test_the_study_rule_alerts_before_acquisition(run: ExampleRun) -> None:
    check_alert_before_acquisition(run, "rankme-recovery")


def test_a_probe_on_the_pooled_norm_reads_the_class(run: ExampleRun) -> None:
    check_probe_accuracy(run, "norm", start_below=0.4, end_above=0.9)


def test_the_probe_crossing_rule_alerts_before_acquisition(run: ExampleRun) -> None:
    check_alert_before_acquisition(run, "probe-crossing")


@NO_SIGN_BY_75_PERCENT
def test_a_forecast_before_acquisition(run: ExampleRun) -> None:
    check_forecast_before_acquisition(run)


@NO_SIGN_BY_75_PERCENT
def test_the_forecast_s_interval_holds_the_acquisition_step(run: ExampleRun) -> None:
    check_forecast_holds_acquisition(run)


def test_every_rule_alerts_or_says_why_not(run: ExampleRun) -> None:
    check_rules_alert_or_say_why(run)


def test_nothing_is_skipped(run: ExampleRun) -> None:
    check_nothing_skipped(run)
