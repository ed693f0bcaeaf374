"""examples/hugging_face_gpt2.py end to end, under Lightning and under transformers.Trainer: a GPT-2 built from a
config on Hugging Face dict batches (``input_ids``, unshifted ``labels``). Plain assertions hold today; strict
xfails name the issue 28 gap that makes them fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.examples.helpers import (
    ExampleRun,
    check_acquired_late,
    check_alert_before_acquisition,
    check_forecast_before_acquisition,
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
PROBED = {"lightning": "ln_f", "transformers": None}  # None: the deepest hidden state the callback probes


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
    check_alert_before_acquisition(run, "study")


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="issue 28: probe labels come only from "
                   "targets + answer_mask (LinearProbeMonitor; the HF callback's probe rows); Hugging Face 'labels' "
                   "(the label of position t is labels[t + 1]) are not read")
def test_a_probe_on_the_final_norm_reads_the_answer(run: ExampleRun) -> None:
    check_probe_accuracy(run, PROBED[run.framework], start_below=0.2, end_above=0.8)  # type: ignore[attr-defined]


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="issue 28: the default forecaster needs "
                   "val/token_acc and the run's chance table, neither of which this run has; no forecast before "
                   "acquisition")
def test_a_forecast_before_acquisition(run: ExampleRun) -> None:
    check_forecast_before_acquisition(run)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="issue 28: a rule whose inputs are missing "
                   "(probe-crossing without probe_acc/) is silent and nothing says why")
def test_every_rule_alerts_or_says_why_not(run: ExampleRun) -> None:
    check_rules_alert_or_say_why(run)


def test_nothing_is_skipped(run: ExampleRun, request: pytest.FixtureRequest) -> None:
    if run.framework == "lightning":  # type: ignore[attr-defined]
        request.applymarker(pytest.mark.xfail(strict=True, raises=AssertionError, reason="issue 28: on Hugging Face "
                                              "dict batches LinearProbeMonitor warns 'batch skipped' and '0 rows "
                                              "captured ... skipped'"))
    # under transformers.Trainer nothing says 'skipped': the callback turns its probes off without a word when the
    # rows have no targets + answer_mask (test_a_probe_on_the_final_norm_reads_the_answer)
    check_nothing_skipped(run)
