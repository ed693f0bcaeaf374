"""The step progress bar and the main command's output, read as a user sees them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
