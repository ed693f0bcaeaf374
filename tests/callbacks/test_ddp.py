"""RankMe under real Lightning DDP (2 CPU processes, gloo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("ddp_rankme_script.py")


@pytest.mark.slow
def test_rankme_under_ddp_gathers_rows_and_writes_once(tmp_path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True,
                            timeout=300, env=env, cwd=SCRIPT.parents[2])
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads((tmp_path / "result.json").read_text())
    assert out["world_size"] == 2
    # each rank holds 128 of the 256 validation rows; the gathered set is all 256
    assert out["rows_used"] == {"0": 256, "1": 256}
    last = out["series"]["rankme/1"][-1]
    assert last[0] == 16
    assert last[1] == pytest.approx(out["reference_last_layer"], rel=1e-5)
    assert len(list(tmp_path.glob("capgeo_summary.json"))) == 1
    assert len(list(tmp_path.rglob("events.out.tfevents.*"))) == 1  # rank zero logs alone
