"""The one definition of finished (run_state) on a command trial's folder: one ``version_*`` folder (a Lightning
logger's) per start, the newest deciding; hand-made folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from capgeo_callbacks.run.summary import SUMMARY_FILENAME
from capgeo_callbacks.sweeps import run_state


def make_version(run_root: Path, version: int, summary: dict[str, Any] | None = None, ckpt: bool = False) -> Path:
    folder = run_root / f"version_{version}"
    folder.mkdir(parents=True)
    if summary is not None:
        (folder / SUMMARY_FILENAME).write_text(json.dumps(summary))
    if ckpt:
        (folder / "checkpoints").mkdir()
        (folder / "checkpoints" / "last.ckpt").write_bytes(b"")
    return folder


def test_run_state_reads_the_run_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert run_state(run, 40) == ("fresh", "new run")
    make_version(run, 0, {"steps": 20, "acquisition_step": 10, "labels": {"full_step": 15}}, ckpt=True)
    assert run_state(run, 40)[0] == "resume"  # budget not reached: continue from last.ckpt
    assert run_state(run, 20)[0] == "finished"
    assert run_state(run, 40, stop_when_learned=True)[0] == "finished"
    # a newer attempt killed before its first checkpoint: --resume would find nothing, so start afresh
    make_version(run, 1)
    assert run_state(run, 40) == ("fresh", "no checkpoint")
    # ... but an older finished summary still counts
    assert run_state(run, 20) == ("finished", "version_0: 20 steps")
    # a capability stopper ended it (the launcher records why): finished, whatever its steps
    stopped = tmp_path / "stopped"
    make_version(stopped, 0, {"steps": 12, "stopped": {"by": "CapabilityStopper", "step": 12, "reason": "no onset"}},
                 ckpt=True)
    assert run_state(stopped, 40) == ("finished", "version_0: stopped at step 12 (no onset)")
    # killed mid-run: checkpoint, no summary (version_10 sorts after version_1 by number, not by text)
    make_version(run, 10, ckpt=True)
    assert run_state(run, 40) == ("resume", "version_10/checkpoints/last.ckpt")
    (run / "version_10" / SUMMARY_FILENAME).write_text("{cut short")  # a crash while writing: ignored
    assert run_state(run, 40)[0] == "resume"


