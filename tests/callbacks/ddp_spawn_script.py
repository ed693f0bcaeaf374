"""Run by tests/callbacks/test_gradient_rank_monitor.py in a process of its own: the gradient-rank, Hessian, LLC and
linear-probe monitors under Lightning's ddp_spawn (gloo, CPU, 2 processes), checked against the pure functions on
rank zero's batch; writes ``ok`` when every check passed."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.callbacks.test_gradient_rank_monitor import check_every_rank_measures_rank_zeros_batch  # noqa: E402

if __name__ == "__main__":  # the spawned ranks import this file again, and must not run it
    root = Path(sys.argv[1])
    check_every_rank_measures_rank_zeros_batch(root)
    (root / "ok").write_text("ok")
