"""The ``capgeo`` command: its help lists the commands, each runs its module, the old ``python -m`` paths stay."""

from __future__ import annotations

import runpy
import sys
import warnings
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


@pytest.mark.parametrize("module", ["capgeo_callbacks.scoring", "capgeo_callbacks.offline", "capgeo_callbacks.cli",
                                    "study.dashboard"])
def test_the_module_paths_still_run(module: str, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    # what ``python -m MODULE --help`` runs, in this process (a new one would spend its time importing torch)
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    with warnings.catch_warnings(), pytest.raises(SystemExit) as exited:
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module is imported already, by this test
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    assert exited.value.code == 0 and "usage:" in capsys.readouterr().out
