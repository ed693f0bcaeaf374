"""examples/hugging_face_gpt2.py end to end, under Lightning and under transformers.Trainer: a GPT-2 built from a
config on Hugging Face dict batches (``input_ids``, unshifted ``labels``); each test asserts one thing the example
states, and a strict xfail says what an honest forecaster measurably cannot do on this run."""

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

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow
LAYERS = {"lightning": ["h.0", "h.1", "ln_f"], "transformers": ["embed", "layers.0", "layers.1+final_norm"]}
# the Lightning monitor's one watched layer keeps its full name; None: the deepest hidden state the callback probes
PROBED = {"lightning": "model.transformer.ln_f", "transformers": None}


@pytest.fixture(scope="module", params=["lightning", "transformers"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ExampleRun:
    example = load_example("hugging_face_gpt2")
    result = run_example(example.main, framework=request.param, root=Path(tmp_path_factory.mktemp(request.param)))
    result.framework = request.param  # type: ignore[attr-defined]
    return result


def test_the_model_acquires_the_task_late(run: ExampleRun) -> None:
    check_acquired_late(run, 1 / 16, plateau_until=50)


def test_rankme_of_every_layer_at_every_evaluation(run: ExampleRun) -> None:
    check_rankme_per_layer(run, LAYERS[run.framework])  # type: ignore[attr-defined]


def test_the_study_rule_alerts_before_acquisition(run: ExampleRun) -> None:
    check_alert_before_acquisition(run, "rankme-recovery")


def test_a_probe_on_the_final_norm_reads_the_answer(run: ExampleRun) -> None:
    check_probe_accuracy(run, PROBED[run.framework], start_below=0.2, end_above=0.8)  # type: ignore[attr-defined]


def test_a_forecast_before_acquisition(run: ExampleRun) -> None:
    check_forecast_before_acquisition(run)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="measured, not a gap: accuracy leaves its plateau "
                   "(0.07-0.13 from step 8 to 54) only at steps 54-58, with acquisition at 78; the forecast made "
                   "then (Lightning: step 58, 153 [93, 2006]; transformers: step 54, 106 [80, 267]) extrapolates a "
                   "rise too young to show how fast it will go on, and its interval misses 78")
def test_the_forecast_s_interval_holds_the_acquisition_step(run: ExampleRun) -> None:
    check_forecast_holds_acquisition(run)


def test_every_rule_alerts_or_says_why_not(run: ExampleRun) -> None:
    check_rules_alert_or_say_why(run)


def test_nothing_is_skipped(run: ExampleRun) -> None:
    check_nothing_skipped(run)
