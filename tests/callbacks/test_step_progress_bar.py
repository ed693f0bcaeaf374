"""The step progress bar and the main command's output, read as a user sees them."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
from lightning.pytorch import Trainer, seed_everything

from capgeo_callbacks import PrecursorDetector, RankMeMonitor, StepProgressBar
from tests.callbacks.conftest import ForeignEncoder, loaders

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_main_command_shows_steps_out_of_the_budget_and_no_foreign_warnings(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "train.py"), "--task", "sort", "--difficulty", "easy",
                             "--max-steps", "24", "--eval-points", "4", "--logdir", str(tmp_path)],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    output = (result.stdout + result.stderr).replace("\r", "\n")
    assert "step: 100%" in output and "24/24" in output
    assert "val/acc=" in output and "rankme norm_f=" in output
    assert "Epoch 0/-2" not in output and "Epoch 0" not in output
    for foreign in ("weights_only", "litlogger", "LeafSpec", "GPU available", "val_check_interval"):
        assert foreign not in output, foreign
    assert "Validation DataLoader" not in output  # validations update the step bar instead
    assert "first warning" in output and "token_acc-threshold" in output  # the rules' table closes the output
    # logging writes above the bar, never onto its line
    assert all(line.startswith("WARNING") for line in output.splitlines() if "WARNING capgeo" in line)


def test_a_log_line_goes_above_an_open_bar_not_onto_it() -> None:
    import io
    import logging

    from tqdm import tqdm

    from capgeo_callbacks.callbacks.step_progress_bar import BarSafeHandler

    stream = io.StringIO()
    handler = BarSafeHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("capgeo.test_bar")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with tqdm(total=10, file=stream, desc="step", ascii=True) as bar:
            bar.update(3)
            logger.warning("an alert at step 3")
            bar.update(7)
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().replace("\r", "\n").splitlines()
    assert "WARNING capgeo.test_bar: an alert at step 3" in lines  # a line of its own


def test_the_bar_counts_steps_out_of_the_budget_with_what_capgeo_watches(tmp_path: Path) -> None:
    seed_everything(0, verbose=False)
    callbacks = [RankMeMonitor(layers="encoder.layers.*", selector="mean", num_rows=64),
                 PrecursorDetector(monitor="val_acc", logprob_monitor=None), StepProgressBar()]
    trainer = Trainer(max_steps=48, val_check_interval=8, logger=False, callbacks=callbacks, enable_checkpointing=False,
                      enable_model_summary=False, accelerator="cpu", default_root_dir=tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        trainer.fit(ForeignEncoder(), *loaders())
    lines = [line for line in printed.getvalue().replace("\r", "\n").splitlines() if line.startswith("step")]
    assert lines and all("/48" in line for line in lines) and "Epoch" not in printed.getvalue()
    assert any("val_acc=" in line and "rankme layers.1=" in line for line in lines)
    assert any("capgeo=" in line and "%/3%" in line for line in lines)  # the overhead share against the budget
    detector = callbacks[1]
    if detector.acquired_step is not None:
        assert f"acquired=step {detector.acquired_step}" in lines[-1]


def test_a_log_file_gets_a_line_per_five_percent_and_one_bar_over_many_epochs(tmp_path: Path) -> None:
    """Output that is not a terminal: a line per 5% of the budget (not one per step), each ending in a newline; under
    max_epochs the budget is the trainer's estimated steps, and the bar's clock runs over every epoch (its rate and
    elapsed time do not restart with each one)."""
    from lightning.pytorch import Callback

    class Clock(Callback):  # the bar's start time at the end of each epoch
        def __init__(self) -> None:
            self.starts: list[float] = []

        def on_train_epoch_end(self, trainer: Trainer, pl_module: object) -> None:
            self.starts.append(trainer.progress_bar_callback.train_progress_bar.start_t)

    seed_everything(0, verbose=False)
    clock = Clock()
    train, val = loaders(batch_size=64)  # 8 batches an epoch
    trainer = Trainer(max_epochs=12, logger=False, callbacks=[StepProgressBar(), clock], enable_checkpointing=False,
                      enable_model_summary=False, accelerator="cpu", default_root_dir=tmp_path,
                      limit_val_batches=0)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        trainer.fit(ForeignEncoder(), train, val)
    lines = [line for line in printed.getvalue().split("\n") if "step" in line]
    assert trainer.global_step == 96
    assert 20 <= len(lines) <= 23, lines  # 96 steps: a line at each 5% and the last, not 96
    assert all("/96" in line for line in lines) and "96/96" in lines[-1]
    assert len(clock.starts) == 12 and len(set(clock.starts)) == 1  # one clock over the 12 epochs
