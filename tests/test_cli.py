"""The ``capgeo`` command: its help lists the commands, each runs its module, the old ``python -m`` paths stay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import capgeo_callbacks
from capgeo_callbacks.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert set(COMMANDS) == {"score", "offline", "dashboard", "measures", "story", "sweep"}
    for name in COMMANDS:
        assert f"    {name}" in out
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capgeo_callbacks.__version__ in capsys.readouterr().out


def test_an_unknown_command_names_the_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["scroe"])
    assert exited.value.code == 2
    assert "invalid choice: 'scroe'" in capsys.readouterr().err


def test_each_command_runs_its_module(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["measures"]) == 0
    assert capsys.readouterr().out.startswith("rankme")
    with pytest.raises(SystemExit) as exited:
        main(["score", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: capgeo score") and "--forecasters" in out
    with pytest.raises(SystemExit):
        main(["offline", "--help"])
    assert "--probe-file" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["dashboard", "--help"])
    assert "RUN_DIR" in capsys.readouterr().out.upper()


@pytest.mark.slow
def test_the_module_paths_still_run() -> None:
    for module in ("capgeo_callbacks.scoring", "capgeo_callbacks.offline", "capgeo_callbacks.cli", "study.dashboard"):
        done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0 and "usage:" in done.stdout, (module, done.stderr[-1000:])
