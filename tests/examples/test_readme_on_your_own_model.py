"""The README's "With Lightning" code, run as printed on a model and task it has never seen.

The python block is taken from README.md as it stands and only ``trainer.fit(...)`` is appended: README and code
cannot drift apart. The model and data are example (a)'s (``examples/own_model.py``: a Llama-like causal LM,
tuple batches ``(inputs, targets)``, ``val/acc`` and ``val/loss`` logged), with one addition of the test's own:
the model stops training once it has held 0.9 accuracy for ten evaluations, as a user's early stopping would, so
the README's 5,000-step budget is not spent on a learned task. Issue 28's "Done when" is asserted item by item.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest

from tests.examples.helpers import (
    ROOT,
    ExampleRun,
    check_acquired_late,
    check_forecast_before_acquisition,
    check_forecast_holds_acquisition,
    check_nothing_skipped,
    check_probe_accuracy,
    check_rankme_under_the_budget,
    check_rules_alert_or_say_why,
    load_example,
    run_example,
)

pytestmark = pytest.mark.slow
HELD, LEVEL = 10, 0.9  # stop once accuracy has been >= LEVEL at HELD evaluations in a row


def readme_block() -> str:
    """The first python block under "## With Lightning" in README.md."""
    section = (ROOT / "README.md").read_text().split("## With Lightning", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, "README.md's 'With Lightning' has no python block"
    return found.group(1)


def test_the_block_builds_a_trainer_and_does_not_fit() -> None:
    code = readme_block()
    assert "trainer = Trainer(" in code and ".fit(" not in code


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> ExampleRun:
    example = load_example("own_model")

    class LearnsThenStops(example.TinyLM):
        def on_validation_epoch_end(self) -> None:
            if self.trainer.sanity_checking:
                return
            self.streak = getattr(self, "streak", 0) + 1 if self.trainer.callback_metrics["val/acc"] >= LEVEL else 0
            if self.streak >= HELD:
                self.trainer.should_stop = True

    def main() -> Path:
        pl.seed_everything(0)
        train, val = example.data(seed=0)
        # a module's globals, as a user's script has (a warning is shown at its line: without a __name__ it is lost)
        namespace: dict[str, Any] = {"__name__": "readme_block", "model": LearnsThenStops(), "train": train,
                                     "val": val}
        with pytest.MonkeyPatch.context() as patch:
            patch.chdir(tmp_path_factory.mktemp("readme"))  # the README's Trainer logs to ./lightning_logs
            exec(readme_block() + "trainer.fit(model, train, val)\n", namespace)  # noqa: S102 - the README's code
            return Path(namespace["trainer"].log_dir).resolve()

    return run_example(main)


def test_the_run_learns_late_and_stops(run: ExampleRun) -> None:
    check_acquired_late(run, 1 / 23, plateau_until=150)
    assert run.summary["steps"] < 5000


def test_rankme_per_layer_under_the_default_budget(run: ExampleRun) -> None:
    """The README keeps the default budget (3%): on this tiny model RankMe may be thinned after the protected start,
    evenly and said once, as a user of the README gets it."""
    check_rankme_under_the_budget(run, ["layers.0", "layers.1", "norm"])


def test_a_summary(run: ExampleRun) -> None:
    assert (run.folder / "capgeo_summary.json").is_file()
    assert run.summary["acquisition_step"] is not None and run.summary["monitor"] == "val/acc"


def test_probe_accuracy(run: ExampleRun) -> None:
    check_probe_accuracy(run, "norm", start_below=0.2, end_above=0.8)  # the final norm, found as the blocks are


def test_a_forecast_before_acquisition(run: ExampleRun) -> None:
    check_forecast_before_acquisition(run)
    check_forecast_holds_acquisition(run)


def test_the_progress_bar_counts_steps_out_of_the_budget(run: ExampleRun) -> None:
    bar = [line for line in run.printed.replace("\r", "\n").splitlines() if line.startswith("step")]
    assert bar and all("/5000" in line for line in bar) and "Epoch" not in run.printed
    assert any("val/acc=" in line and "rankme norm=" in line and "forecast (acc-trend)=step" in line for line in bar)


def test_the_rules_alert_or_say_once_why_not(run: ExampleRun) -> None:
    check_rules_alert_or_say_why(run)


def test_no_skipped_warning(run: ExampleRun) -> None:
    check_nothing_skipped(run)
