"""``capgeo sweep`` (capgeo_callbacks.sweeps.cli): a grid from the command line or a JSON file, errors named before
anything runs, a dry run that lists the trials and their calls, and a tiny function swept on a local Ray, then
skipped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capgeo_callbacks import cli
from capgeo_callbacks.sweeps import TRIAL_RECORD
from capgeo_callbacks.sweeps.cli import parse_args, parse_grid, read_config, threads_per_run
from capgeo_callbacks.sweeps.trials import read_trial_record

FUNCTION = "examples.sweep_function:train"


def tiny(config: dict[str, Any]) -> None:
    """A training function that trains nothing: it writes its settings where the launcher said."""
    Path(config["trial_dir"], "settings.json").write_text(json.dumps({"x": config["x"], "y": config["y"]}))


def test_a_grid_reads_values_as_json_else_as_strings() -> None:
    assert parse_grid(["lr=0.001,3e-3", "seed=0,1", "wd=true,null", "family=recall,sum3"]) == {
        "lr": [0.001, 0.003], "seed": [0, 1], "wd": [True, None], "family": ["recall", "sum3"]}


def test_a_config_file_gives_values_and_the_grid_replaces_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"lr": [0.002, 0.004], "seed": 0, "layers": [[1, 2]]}))
    assert read_config(path) == {"lr": [0.002, 0.004], "seed": [0], "layers": [[1, 2]]}
    args = parse_args([FUNCTION, "--config", str(path), "--grid", "seed=1,2", "--logdir", str(tmp_path / "runs")])
    assert [trial.settings for trial in args.trials][:2] == [{"lr": 0.002, "seed": 1, "layers": [1, 2]},
                                                             {"lr": 0.002, "seed": 2, "layers": [1, 2]}]
    assert len(args.trials) == 4


def test_threads_per_run_shares_the_cores() -> None:
    assert threads_per_run(jobs=2, cores=2) == 1
    assert threads_per_run(jobs=1, cores=8) == 8
    assert threads_per_run(jobs=4, cores=2) == 1
    assert threads_per_run(jobs=1, threads=3, cores=8) == 3


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--grid", "seed"], "--grid takes KEY=V1,V2,... items, got 'seed'"),
     (["--grid", "seed=0,", "lr=1"], "--grid 'seed=0,' has an empty value"),
     (["--grid", "seed=0", "seed=1"], "--grid gives 'seed' twice"),
     (["--grid", "trial_dir=a"], "grid key 'trial_dir' is reserved"),
     (["--config", "no-such-file.json"], "--config no-such-file.json: [Errno 2]"),
     (["--grid", "seed=0", "--jobs", "0"], "--jobs must be at least 1, got 0"),
     (["--grid", "seed=0", "--address", "auto", "--engine", "submitit"], "--address joins a Ray cluster"),
     (["--grid", "seed=0", "--slurm", "partition"], "--slurm takes KEY=VALUE pairs")],
)
def test_errors_come_before_any_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str],
                                    message: str) -> None:
    with pytest.raises(SystemExit):
        cli.main(["sweep", FUNCTION, "--logdir", str(tmp_path), *flags])
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_function_that_cannot_be_found_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["sweep", "examples.sweep_function:nothing", "--grid", "seed=0", "--logdir", str(tmp_path)])
    assert "examples.sweep_function has no 'nothing'" in capsys.readouterr().err


def test_the_console_command_lists_sweep_and_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "sweep" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        cli.main(["sweep", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: capgeo sweep") and "MODULE:FUNCTION" in out and "--engine {ray,submitit}" in out


def test_a_dry_run_lists_the_grid_and_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["sweep", FUNCTION, "--grid", "lr=0.002,0.004", "seed=0,1", "--logdir", str(tmp_path),
                     "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == ["lr=0.002,seed=0", "lr=0.002,seed=1", "lr=0.004,seed=0",
                                                   "lr=0.004,seed=1"]
    assert " run " in lines[0] and "(new run)" in lines[0]
    config = json.loads(lines[3].split(f"{FUNCTION}(", 1)[1].removesuffix(")"))
    assert config == {"lr": 0.004, "seed": 1, "trial_dir": str(tmp_path.absolute() / "lr=0.004,seed=1"),
                      "resume_from": None}
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_tiny_function_is_swept_on_a_local_ray_then_skipped(local_ray: None, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    command = ["sweep", "tests.sweeps.test_cli:tiny", "--grid", "x=1,2", "y=a", "--logdir", str(tmp_path / "grid"),
               "--jobs", "2"]
    assert cli.main(command) == 0
    out = capsys.readouterr().out
    assert "launch: 2 done" in out, out
    for x in (1, 2):
        root = tmp_path / "grid" / f"x={x},y=a"
        assert json.loads((root / "settings.json").read_text()) == {"x": x, "y": "a"}
        record = read_trial_record(root)
        assert record is not None and record["returned"] and record["settings"] == {"x": x, "y": "a"}
    assert cli.main(command) == 0
    again = capsys.readouterr().out
    assert "launch: 2 skipped" in again and f"skipped (finished: {TRIAL_RECORD}: the function returned)" in again
