"""The command line (``python -m capgeo_callbacks.offline``): the summary file, the printed table, usage errors
as exit code 2, detection flags over the recorded settings."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

from capgeo_callbacks.detection import DetectionSettings
from capgeo_callbacks.offline import format_report, main
from capgeo_callbacks.offline.cli import _settings, build_parser
from capgeo_callbacks.run.summary import OFFLINE_SUMMARY_FILENAME
from tests.offline.conftest import REL, SETTINGS, TrainedRun, save_rows


def test_cli_writes_summary_and_table(hf_revisions, probe_rows, tmp_path, capsys) -> None:
    probe = save_rows(tmp_path / "rows.pt", probe_rows, ("input_ids",))
    out = tmp_path / "summary.json"
    code = main([str(hf_revisions), "--probe-file", str(probe), "--num-rows", "64", "--layers", "layers.*",
                 "--output", str(out), "--min-drop", "0.3"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "layers.2+final_norm" in printed and "after the final layer norm" in printed
    assert "= step200 (identical weights)" in printed
    assert "verdict: not-acquired" in printed and "collapse step" in printed  # summary.verdict_table
    summary = json.loads(out.read_text())
    assert summary["analysis"]["layers"] == ["layers.0", "layers.1", "layers.2+final_norm"]
    assert summary["steps"] == 1000 and summary["analysis"]["num_rows"] == 64
    assert summary["settings"] == DetectionSettings(min_drop=0.3).to_dict()
    assert summary["analysis"]["recorded"]["settings"] == "given"

    assert main([str(hf_revisions), "--probe-file", str(probe), "--num-rows", "64", "--quiet"]) == 0
    assert (hf_revisions / OFFLINE_SUMMARY_FILENAME).is_file()  # the default output: beside the revisions
    (hf_revisions / OFFLINE_SUMMARY_FILENAME).unlink()  # the revisions folder is shared by other tests


def test_usage_errors_exit_with_2_and_say_what_to_pass(hf_revisions, probe_rows, tmp_path, capsys) -> None:
    out = tmp_path / "summary.json"
    assert main([str(hf_revisions), "--output", str(out)]) == 2  # no probe set
    assert "--probe-file" in capsys.readouterr().err
    probe = save_rows(tmp_path / "rows.pt", probe_rows, ("input_ids",))
    assert main([str(hf_revisions), "--probe-file", str(probe), "--min-drop", "1.5", "--output", str(out)]) == 2
    assert "min_drop must be in (0, 1)" in capsys.readouterr().err
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main([str(hf_revisions), "--num-rows", "1"])
    assert exit_info.value.code == 2 and "--num-rows must be at least 2" in capsys.readouterr().err
    assert not out.exists()


def test_detection_flags_replace_the_recorded_settings(trained_run: TrainedRun) -> None:
    parser = build_parser()
    assert _settings(parser.parse_args([str(trained_run.run_dir)])) is None  # analyze reads the recorded ones
    given = _settings(parser.parse_args([str(trained_run.run_dir), "--threshold", "0.8", "--smoothing", "3"]))
    assert given == SETTINGS.replace(threshold=0.8, smoothing=3)


def test_report_prints_revisions_then_the_verdict_table(offline_run) -> None:
    report = format_report(offline_run)
    lines = report.splitlines()
    assert lines[0].startswith("offline analysis of 9 lightning revision(s); probe set: copy/easy val set")
    assert "skipped last.ckpt (step 36): same step and weights as step=36.ckpt" in report
    assert report.index("RankMe per layer") < report.index(f"verdict: {offline_run['verdict']}")
    assert all(layer in report for layer in offline_run["layers"])


@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")  # runpy, as the module is imported
@pytest.mark.parametrize("module", ["capgeo_callbacks.offline"])
def test_python_dash_m(module, monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    assert exit_info.value.code == 0
    assert "Per-layer RankMe and precursor detection over saved revisions" in capsys.readouterr().out


@pytest.mark.slow
def test_train_py_run_analysed_offline(tmp_path) -> None:
    train = pytest.importorskip("train")
    live = train.main(["--task", "mod", "--difficulty", "easy", "--max-steps", "32", "--eval-points", "4",
                       "--measures", "rankme", "--logdir", str(tmp_path), "--no-progress"])
    run_dir = Path(live["run_dir"])
    out = tmp_path / "offline.json"
    # everything else (class, layers, selector, rows, task, difficulty, seed, settings) is read from the
    # checkpoint and its run folder
    assert main([str(run_dir), "--output", str(out), "--quiet"]) == 0
    offline = json.loads(out.read_text())
    assert live["datamodule_factory"] == "tasks.datamodule.make_datamodule"  # how the probe rows are rebuilt
    for key in ("task", "difficulty", "size", "seed", "parameters", "max_steps", "task_params", "datamodule",
                "datamodule_factory", "settings", "monitor", "selectors"):
        assert offline[key] == live[key], key
    assert offline["analysis"]["watched"] == ["model.blocks.*", "model.norm_f"]  # the live monitor's patterns
    [revision] = offline["revisions"]
    assert revision["step"] == 32
    for tag, points in live["series"].items():
        if tag.startswith("rankme/"):
            assert revision["rankme"][tag.removeprefix("rankme/")] == pytest.approx(points[-1][1], rel=REL), tag
            assert offline["rows"][tag] == live["rows"][tag]
    assert revision["acc"] == pytest.approx(live["series"]["acc"][-1][1], abs=1e-9)
