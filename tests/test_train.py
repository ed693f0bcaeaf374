"""train.py end to end: the CLI contract and one real tiny run read back from its event files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tasks
import train
import train_cli
from capgeo_callbacks.run.schedule import evaluation_steps
from models import SIZES
from tests.callbacks.conftest import read_events

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


@pytest.mark.slow
def test_help_lists_every_choice() -> None:  # the script itself, in a process of its own
    result = run_cli("--help")
    assert result.returncode == 0
    for choice in (*tasks.TASKS, *tasks.DIFFICULTIES, *SIZES, *train.MEASURES):
        assert choice in result.stdout


@pytest.mark.parametrize(
    ("flag", "value", "listed"),
    [("--task", "sorting", "copy, reverse"), ("--difficulty", "extreme", "easy, medium, hard"),
     ("--size", "giant", "xs, s, m")],
)
def test_bad_choice_exits_before_training(flag: str, value: str, listed: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--task", "sort", flag, value] if flag != "--task" else [flag, value]
    with pytest.raises(SystemExit) as exited:
        train.main([*args, "--logdir", "/nonexistent/never-created"])
    assert exited.value.code != 0
    stderr = capsys.readouterr().err
    assert "invalid choice" in stderr and listed.split(", ")[0] in stderr
    assert not Path("/nonexistent/never-created").exists()


def test_bad_measures_and_steps_are_errors() -> None:
    with pytest.raises(SystemExit):
        train.parse_args(["--task", "sort", "--measures", "rankme,bogus"])
    with pytest.raises(SystemExit):
        train.parse_args(["--task", "sort", "--max-steps", "0"])


def test_measures_and_their_options_are_the_measured_choices() -> None:
    """Generated from the measure registry (capgeo_callbacks.registry), they are what train.py has always used:
    a run's values do not change with the registry."""
    assert (train.MEASURES, train.DEFAULT_MEASURES) == (
        ("rankme", "ildr", "probes", "weight_norm", "grad_rank", "hessian", "llc", "commutator"),
        ("rankme", "ildr", "probes", "weight_norm"))
    layers, options = ("model.blocks.*", "model.norm_f"), train.MEASURE_OPTIONS
    assert options == {
        "rankme": {"every_n_evals": 1, "ildr_prefix": None, "layers": layers, "selector": "first_answer",
                   "num_rows": 512},
        "ildr": {"every_n_evals": 1, "ildr_prefix": "ildr"},  # on RankMe's rows: switched on in its monitor
        "probes": {"every_n_evals": 4, "layers": layers, "num_rows": 2048},
        "weight_norm": {"every_n_evals": 1},
        "grad_rank": {"every_n_evals": 4, "batch_size": 64},
        "hessian": {"every_n_evals": 16, "k": 1, "num_iterations": 20, "batch_size": 64},
        "llc": {"every_n_evals": 32, "num_chains": 2, "num_draws": 50, "batch_size": 64, "num_batches": 2},
        "commutator": {"every_n_evals": 8, "batch_size": 64, "num_pairs": 1},
    }
    assert [train_cli.resolve_measures(spec) for spec in ("default", "none", "all", "llc,rankme")] == [
        ["rankme", "ildr", "probes", "weight_norm"], [], list(train.MEASURES), ["llc", "rankme"]]
    callbacks = train.build_measure_callbacks(["llc", "rankme"], run_info={}, answer_len=1)
    assert [type(cb).__name__ for cb in callbacks] == ["RankMeMonitor", "LLCMonitor", "PrecursorDetector"]
    assert callbacks[-1].settings is train.SETTINGS and callbacks[0].ildr_prefix is None
    # the default: ILDR on RankMe's rows, by RankMe's monitor (one capture of the rows, as before)
    [rankme, *_] = train.build_measure_callbacks(list(train.DEFAULT_MEASURES), run_info={}, answer_len=1)
    assert (rankme.ildr_prefix, rankme.selector, rankme.num_rows) == ("ildr", "first_answer", 512)


def test_the_commutator_defect_is_a_flag_off_by_default() -> None:
    assert "commutator" not in train.parse_args(["--task", "sort"]).measure_names
    names = train.parse_args(["--task", "sort", "--measures", "default,commutator"]).measure_names
    assert names == ["rankme", "ildr", "probes", "weight_norm", "commutator"]
    callbacks = train.build_measure_callbacks(names, run_info={}, answer_len=1)
    monitor = next(cb for cb in callbacks if type(cb).__name__ == "CommutatorDefectMonitor")
    assert (monitor.every_n_evals, monitor.batch_size, monitor.num_pairs) == (8, 64, 1)
    assert train.parse_args(["--task", "sort"]).overhead_budget == "measure"  # the bench keeps every point


@pytest.mark.parametrize("stop", ["0", "101"])
def test_stop_at_step_outside_the_budget_is_an_error(stop: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        train.parse_args(["--task", "sort", "--max-steps", "100", "--stop-at-step", stop])
    assert f"--stop-at-step must be between 1 and --max-steps (100), got {stop}" in capsys.readouterr().err
    args = train.parse_args(["--task", "sort", "--max-steps", "100", "--stop-at-step", "40"])
    assert (args.max_steps, args.stop_at_step) == (100, 40)
    assert train.parse_args(["--task", "sort", "--max-steps", "100"]).stop_at_step == 100


def test_unwritable_logdir_is_a_clear_error(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(SystemExit, match="is not writable"):
        train.main(["--task", "sort", "--difficulty", "easy", "--max-steps", "2", "--logdir", str(blocker / "x")])


@pytest.mark.slow
def test_tiny_run_leaves_what_the_spec_lists(tmp_path, capsys) -> None:
    summary = train.main(["--task", "sort", "--difficulty", "easy", "--max-steps", "48", "--eval-points", "6",
                          "--logdir", str(tmp_path), "--no-progress"])
    run_dir = Path(summary["run_dir"])
    printed = capsys.readouterr().out
    assert "verdict:" in printed and "layer" in printed

    events = read_events(run_dir)
    scalars = set(events.Tags()["scalars"])
    assert {"val/acc", "val/loss", "val/logprob", "train/loss"} <= scalars
    assert {"rankme/blocks.0", "rankme/blocks.1", "rankme/norm_f"} <= scalars
    assert len(events.Scalars("val/acc")) == 6
    assert "capgeo/rankme_heatmap" in events.Tags()["images"]
    tensors = events.Tags()["tensors"]
    assert any(t.startswith("capgeo/verdict") for t in tensors)
    assert "custom_scalars__config__" in tensors
    assert (run_dir / "checkpoints" / "last.ckpt").exists()

    saved = json.loads((run_dir / "capgeo_summary.json").read_text())
    for key in ("task", "difficulty", "size", "parameters", "steps", "acquisition_step", "logprob_emergence_step",
                "layers", "verdict", "gap", "layer_order_rho", "series", "rows", "selectors", "settings"):
        assert key in saved, key
    assert saved["task"] == "sort" and saved["size"] == "xs" and saved["steps"] == 48
    assert set(saved["layers"]) == {"blocks.0", "blocks.1", "norm_f"}
    assert all(rows == 512 for tag, rows in saved["rows"].items() if tag.startswith("rankme/"))
    assert saved["selectors"]["rankme"] == "first_answer"
    # the geometric schedule over 48 steps: the initialised model, two early points, three evenly after
    assert [p[0] for p in saved["series"]["rankme/norm_f"]] == evaluation_steps(48, 6) == [0, 1, 5, 19, 34, 48]
    # the bench measures by default: every point kept, capgeo's share recorded, printed and in the run info
    overhead = saved["overhead"]
    assert saved["overhead_budget"] == "measure" and (overhead["setting"], overhead["thinned"]) == ("measure", 0)
    assert all(overhead["shares"]["whole_run"][clock] > 0 for clock in ("cpu", "wall"))
    assert "capgeo's cost: CPU " in printed and "measured only, nothing thinned" in printed


def _probe_many(logdir: str) -> int:
    for _ in range(200):
        train.check_logdir(logdir)
    return 0


@pytest.mark.slow
def test_runs_started_at_once_into_one_folder_do_not_race(tmp_path) -> None:
    """Each process writes a probe file of its own: with a fixed name, one deleted another's and died."""
    import multiprocessing

    # spawned, not forked: a worker that runs Ray's tests holds threads, and a fork of it can hang on their locks
    with multiprocessing.get_context("spawn").Pool(6) as pool:
        assert pool.map(_probe_many, [str(tmp_path)] * 6) == [0] * 6
    assert list(tmp_path.iterdir()) == []  # no probe left behind


def test_warmup_and_schedule_flags() -> None:
    args = train.parse_args(["--task", "sort", "--max-steps", "500"])
    assert (args.warmup_steps, args.lr_schedule) == (50, "cosine")  # the default: at most a tenth of the budget
    args = train.parse_args(["--task", "sort", "--max-steps", "500", "--warmup-steps", "300"])
    assert args.warmup_steps == 300  # an explicit warm-up is used as given
    with pytest.raises(SystemExit):
        train.parse_args(["--task", "sort", "--max-steps", "500", "--warmup-steps", "501"])
    with pytest.raises(SystemExit):
        train.parse_args(["--task", "sort", "--lr-schedule", "linear"])
    with pytest.raises(SystemExit):
        train.parse_args(["--task", "add", "--task-params", '{"digit": 3}'])


@pytest.mark.parametrize(("schedule", "warmup", "expected"), [
    ("constant", 0, [1.0, 1.0, 1.0, 1.0]), ("constant", 2, [0.5, 1.0, 1.0, 1.0]),
    ("cosine", 0, [1.0, 0.775, 0.325, 0.1]),
])
def test_learning_rate_schedules(schedule: str, warmup: int, expected: list[float]) -> None:
    from models import CapabilityModule

    module = CapabilityModule(size="xs", vocab_size=8, max_seq_len=4, lr=1.0, warmup_steps=warmup, max_steps=3,
                              lr_schedule=schedule)
    config = module.configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    rates = []
    for _ in range(4):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates == pytest.approx(expected)
    with pytest.raises(ValueError, match="unknown lr_schedule 'linear'; valid: cosine, constant"):
        CapabilityModule(size="xs", vocab_size=8, max_seq_len=4, lr_schedule="linear")


@pytest.mark.slow
def test_a_run_without_measures_still_records_everything(tmp_path) -> None:
    summary = train.main(["--task", "copy", "--difficulty", "easy", "--max-steps", "30", "--eval-points", "5",
                          "--measures", "none", "--logdir", str(tmp_path), "--no-progress", "--warmup-steps", "0",
                          "--lr-schedule", "constant"])
    saved = json.loads((Path(summary["run_dir"]) / "capgeo_summary.json").read_text())
    assert set(saved["series"]) == {"acc", "val/token_acc", "val/loss", "val/logprob", "train/loss", "lr"}
    assert [point[1] for point in saved["series"]["lr"]] == [1e-3] * 5  # constant, no warm-up
    assert (saved["warmup_steps"], saved["lr_schedule"], saved["measure_names"]) == (0, "constant", [])
    assert set(saved["chance"]) == {"exact", "token_acc", "logprob", "logprob_sd", "questions", "tokens"}
    assert saved["labels"]["outcome"] in {"chance", "partial", "acquired", "acquired-fully", "fell-back"}
    assert len(saved["commit"]) == 40 and saved["cpu_seconds"] > 0 and saved["validation_size"] == 512
    assert saved["accelerator"].startswith("cpu") and saved["machine"].endswith(f"({saved['accelerator']})")
    assert (saved["resumes"], saved["threads"]) == (0, torch.get_num_threads())


def test_run_cost_is_carried_across_resumes() -> None:
    """A resumed part starts from the checkpoint's totals: time of earlier parts is never lost, even when a part
    was killed before it wrote a summary."""
    first = train.RunCost()
    first.cpu_seconds, first.wall_seconds = 12.5, 30.0  # what an earlier part had counted at its checkpoint
    saved = first.state_dict()
    assert saved == {"cpu_seconds": 12.5, "wall_seconds": 30.0, "resumes": 0}
    resumed = train.RunCost()
    resumed.load_state_dict(saved)
    again = train.RunCost()
    again.load_state_dict(resumed.state_dict())
    assert (again.cpu_seconds, again.wall_seconds, again.resumes) == (12.5, 30.0, 2)


def test_provenance_names_the_threads_and_a_clean_tree_from_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the checkout has no git, the launching machine says which commit and whether its tree was clean."""
    monkeypatch.setenv("CAPGEO_COMMIT", "a" * 40)
    monkeypatch.setenv("CAPGEO_TREE_CLEAN", "1")
    monkeypatch.setattr(train.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(OSError("no git")))
    record = train.provenance()
    assert (record["commit"], record["uncommitted_changes"]) == ("a" * 40, False)
    assert record["threads"] == torch.get_num_threads()


def test_the_registration_is_recorded_without_a_machine_path(tmp_path: Path) -> None:
    """Inside the checkout, relative to it; outside, by its name: no summary names a folder of its machine."""
    assert train_cli.registered_rules(str(train_cli.REGISTRATION))[1]["path"] == "study/registration.json"
    elsewhere = tmp_path / "mine.json"
    elsewhere.write_bytes(train_cli.REGISTRATION.read_bytes())
    assert train_cli.registered_rules(str(elsewhere))[1]["path"] == "mine.json"
