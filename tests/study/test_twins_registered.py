"""The twins' registered phases: the draft names every field the runner reads and is refused as a registration; a
filled-in registration gives the runs seed by seed across the cells with the controls interleaved, each with the
registered settings; every twin records at least 8 commutator defect values before a quarter of its budget; what
must be refused is, before any run; and tiny real twins are exported bound to the registration, resumed without
running again, fitted, and the held-out phase waits for the committed fit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capgeo_callbacks.run.summary import read_summary
from capgeo_callbacks.scoring.leads import GRIDS
from study.phases import twins_analysis as analysis
from study.phases import twins_registered as runner
from study.phases.corpus import write_packed
from study.registrations import policy
from sweep import TrainTrial

DRAFT = runner.ROOT / "study" / "twins_registration_draft.json"
CELLS = [
    {"cell": "sort-medium-b450", "family": "tasks", "argv": ["--task", "sort", "--difficulty", "medium",
                                                             "--max-steps", "450"]},
    {"cell": "compare-hard-b2400", "family": "tasks", "argv": ["--task", "compare", "--difficulty", "hard",
                                                               "--max-steps", "2400"]},
    {"cell": "grok-sub-f0.45-wd1", "family": "grokking", "config": {"operation": "sub", "fraction": 0.45,
                                                                    "weight_decay": 1.0, "max_steps": 1800}},
]


def filled(folder: Path, cells: list[dict[str, Any]] = CELLS, **changes: Any) -> Path:
    """The draft filled in as the registration would be: cells from the pilots, the draft's marker dropped."""
    found = json.loads(DRAFT.read_text())
    del found["DRAFT"]
    found.update(cells=cells, **changes)
    path = folder / "twins_registration.json"
    path.write_text(json.dumps(found))
    return path


def test_the_draft_names_what_the_runner_reads_and_is_no_registration() -> None:
    draft = json.loads(DRAFT.read_text())
    assert set(runner.READS) <= set(draft) and draft["overhead_budget"] == "measure" and draft["threads"] == 1
    with pytest.raises(SystemExit, match="marked DRAFT: not a registration"):
        runner.registration(DRAFT)
    assert list(draft["rules"]["compared"]) == list(GRIDS)  # the library's grids, by their names
    assert draft["rules"]["geometric"] == [name for name, grid in GRIDS.items() if grid.geometric]
    assert draft["rules"]["validation_loss_rule"] == analysis.VAL_LOSS_RULE
    features = draft["features"]
    assert set(features["base"]) == {*analysis.BASE, "missing_base"}
    assert set(features["geometry"]) - {"early_value"} == {*analysis.GEOMETRY, *analysis.MISSING} - {"missing_base"}
    assert "commutator_change" in analysis.MODELS["geometry"] and "missing_commutator" in analysis.MODELS["geometry"]
    secondary = draft["endpoints"]["secondary"]  # each signal alone, by the name the analysis gives its model
    assert [name for name in secondary if name.startswith("base+")] == list(analysis.SIGNAL_MODELS)
    for name, features in analysis.SIGNAL_MODELS.items():
        assert secondary[name].split("the features ")[1].split(", ") == list(features)
        assert name in draft["models"]["signals_alone"]
    assert "--measures" in draft["train.py"]["argv"] and draft["grokking"]["fixed"]["commutator"] is True
    assert not [word for word in draft["train.py"]["argv"] if word in ("--seed", "--overhead-budget", "--task")]


def test_a_phase_runs_seed_by_seed_with_the_controls_interleaved(tmp_path: Path) -> None:
    path = filled(tmp_path)
    calibration = runner.jobs("calibration", path, runs=tmp_path / "runs")
    assert len(calibration) == 3 * (12 + 2)
    rounds = [calibration[i:i + 3] for i in range(0, len(calibration), 3)]
    assert all([job.tags["cell"] for job in round_] == [cell["cell"] for cell in CELLS] for round_ in rounds)
    order = [(job.tags["seed"], job.tags["control"]) for job in calibration[::3]]
    seeds = [(seed, False) for seed in range(3100, 3112)]
    assert order == [*seeds[:3], (3190, True), *seeds[3:9], (3191, True), *seeds[9:]]  # after the 3rd seed, the 9th
    heldout = runner.jobs("heldout", path)
    assert [i for i, job in enumerate(heldout[::3]) if job.tags["control"]] == [6, 19]  # after the 6th and the 18th
    assert {job.tags["seed"] for job in heldout}.isdisjoint({job.tags["seed"] for job in calibration})
    sort, compare, grok = calibration[:3]
    assert isinstance(sort, TrainTrial) and sort.name == "sort-medium-b450-s3100"
    assert sort.root.parent == tmp_path / "runs" / "calibration"
    args = sort.args  # train.py's own reading of the arguments
    assert (args.task, args.difficulty, args.size, args.max_steps, args.lr, args.seed) == ("sort", "medium", "xs", 450,
                                                                                           0.001, 3100)
    assert args.measure_names == ["rankme", "ildr", "probes", "weight_norm", "commutator"]  # default,commutator
    assert args.overhead_budget == "measure"
    assert args.stop_when_learned and args.registered == ([], None) and not args.shuffle_answers
    control = next(job for job in calibration if job.tags["control"] and job.tags["cell"] == "sort-medium-b450")
    assert control.name == "sort-medium-b450-s3190-control" and control.args.shuffle_answers
    assert grok.name == "grok-sub-f0.45-wd1-s3100" and grok.kind == "function"
    assert grok.settings == {**json.loads(DRAFT.read_text())["grokking"]["fixed"], **CELLS[2]["config"],
                             "seed": 3100, "control": False}
    assert (sort.cpus, grok.cpus) == (1, 1)


@pytest.mark.parametrize("budget", [450, 600, 900, 1200, 1800, 2400, 3000])
def test_every_twin_gets_8_defect_values_before_a_quarter_of_its_budget(tmp_path: Path, budget: int) -> None:
    """Counted on each family's own evaluation schedule and the defect's cadence, as the runs will have them."""
    cells = [{"cell": f"sort-medium-b{budget}", "family": "tasks",
              "argv": ["--task", "sort", "--difficulty", "medium", "--max-steps", str(budget)]},
             {**CELLS[2], "config": {**CELLS[2]["config"], "max_steps": budget}}]
    found = json.loads(filled(tmp_path, cells).read_text())
    for cell in cells:
        name, steps, points, schedule, every = runner.measuring(runner.twin(found, cell, 0, False, "calibration"))
        assert (name, steps, points, schedule, every) == (cell["cell"], budget, 256, "geometric", 8)
        assert runner.defect_values(steps, points, schedule, every) >= 9
    # the known count on an even schedule: every 2nd step evaluated, every 8th evaluation measured: 0, 16, ..., 112
    assert runner.defect_values(450, 256, "linear", 8) == 8


def test_a_registration_is_refused_before_any_run_where_it_is_not_one(tmp_path: Path) -> None:
    tiny = {"cell": "sort-medium-b60", "family": "tasks", "argv": ["--task", "sort", "--difficulty", "medium",
                                                                   "--max-steps", "60"]}
    cases = [
        ({"DRAFT": "still a draft"}, None, "marked DRAFT"),
        ({}, [json.loads(DRAFT.read_text())["cells"][0]], "not filled in from the pilots"),
        ({}, [{**CELLS[0], "example_only": True}], "not filled in from the pilots"),
        ({}, [{**CELLS[2], "family": "tasks"}], "its name says 'grokking'"),
        ({}, [{**CELLS[0], "cell": "sort-medium-b500"}], "its settings make the cell sort-medium-b450"),
        ({"train.py": {"argv": ["--size", "xs", "--registration", "none"]}}, None,
         "0 commutator defect values before 25%"),
        ({}, [tiny], "fewer than 8"),
        ({"grokking": {**json.loads(DRAFT.read_text())["grokking"], "fixed": {"commutator": False}}}, None,
         "grok-sub-f0.45-wd1: 0 commutator defect values"),
        ({"train.py": {"argv": ["--size", "huge"]}}, None, "train.py refuses its arguments"),
    ]
    for changes, cells, message in cases:
        with pytest.raises(SystemExit, match=message):
            runner.jobs("calibration", filled(tmp_path, cells or CELLS, **changes))
    lacking = json.loads(filled(tmp_path).read_text())
    del lacking["seeds"]
    (tmp_path / "lacking.json").write_text(json.dumps(lacking))
    with pytest.raises(SystemExit, match="lacks seeds"):
        runner.jobs("calibration", tmp_path / "lacking.json")


def test_a_phase_refuses_an_uncommitted_registration_and_twins_made_under_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = filled(tmp_path)
    monkeypatch.setattr(runner, "require_clean_tree", lambda what: "c" * 40)
    with pytest.raises(SystemExit, match="is not committed as it is"):  # the policy's own check: not in git
        runner.run_phase("calibration", path=path)
    monkeypatch.setattr(runner, "committed", lambda file: file == path)
    monkeypatch.setattr(runner, "FOLDER", tmp_path / "corpus")
    write_packed({"name": "sort-medium-b450-s3100", "registration": {"sha256": "another"}, "commit": "c" * 40},
                 tmp_path / "corpus" / "calibration" / "sort-medium-b450-s3100.json.gz")
    with pytest.raises(SystemExit, match="was not made under twins_registration.json as committed"):
        runner.run_phase("calibration", path=path)


def test_no_twin_is_read_before_the_registration_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "FOLDER", tmp_path / "corpus")
    missing = tmp_path / "twins_registration.json"
    assert runner.exported("calibration", missing) == []
    write_packed({"name": "sort-medium-b450-s3100"}, tmp_path / "corpus" / "calibration" / "x.json.gz")
    with pytest.raises(SystemExit, match="holds twins but twins_registration.json does not exist"):
        runner.exported("calibration", missing)


def test_the_held_out_twins_wait_for_the_committed_fit_on_the_exported_calibration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = filled(tmp_path)
    fitted = tmp_path / "twins_fitted.json"
    monkeypatch.setattr(runner, "require_clean_tree", lambda what: "c" * 40)
    monkeypatch.setattr(runner, "FOLDER", tmp_path / "corpus")
    monkeypatch.setattr(runner, "FITTED", fitted)
    monkeypatch.setattr(runner, "committed", lambda file: file in (path, fitted))
    with pytest.raises(SystemExit, match="start after the calibration fit"):
        runner.run_phase("heldout", path=path)
    fitted.write_text(json.dumps({"calibration_runs": ["sort-medium-b450-s3100"]}))
    with pytest.raises(SystemExit, match="fitted on 1 calibration twins, not on the 0 exported"):
        runner.run_phase("heldout", path=path)
    with pytest.raises(SystemExit, match="42 registered calibration twins are not exported yet"):
        runner.fit_calibration(path)


TINY_CELLS = [
    {"cell": "sort-easy-b24", "family": "tasks", "argv": ["--task", "sort", "--difficulty", "easy", "--max-steps",
                                                          "24"]},
    {"cell": "grok-add-f0.5-wd1", "family": "grokking", "config": {"operation": "add", "fraction": 0.5,
                                                                   "weight_decay": 1.0, "max_steps": 24}},
]


@pytest.mark.slow
def test_tiny_twins_are_exported_bound_to_the_registration_and_resumed_not_rerun(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import train
    from capgeo_callbacks.sweeps.trials import run_trial

    commit = "c" * 40  # the clean checkout the phase runs from, as each run records it
    path = filled(tmp_path, TINY_CELLS, seeds={"calibration": {"seeds": [7], "control_seeds": [8]},
                                               "heldout": {"seeds": [9], "control_seeds": []}},
                  grokking={"function": "examples.grokking.grokking:train",
                            "fixed": {"p": 11, "dim": 16, "heads": 2, "batch_size": 32, "warmup": 2, "stop_at": 0.99,
                                      "commutator": True}})
    runs, corpus = tmp_path / "runs", tmp_path / "corpus"
    for name, value in (("RUNS", runs), ("FOLDER", corpus), ("FITTED", tmp_path / "fitted.json"),
                        ("MIN_DEFECT_VALUES", 1), ("require_clean_tree", lambda what: commit),
                        ("committed", lambda file: file == path)):
        monkeypatch.setattr(runner, name, value)
    monkeypatch.setattr(policy, "registered_before", lambda registration, made: made == commit)
    monkeypatch.setattr(train, "provenance", lambda: {"commit": commit, "uncommitted_changes": False, "threads": 1,
                                                      "omp_num_threads": "1", "torch": "t", "lightning": "l"})
    monkeypatch.setenv("CAPGEO_COMMIT", commit)
    monkeypatch.setenv("CAPGEO_TREE_CLEAN", "1")
    trials = runner.jobs("calibration", path)
    assert [trial.name for trial in trials] == ["sort-easy-b24-s7", "grok-add-f0.5-wd1-s7",
                                                "sort-easy-b24-s8-control", "grok-add-f0.5-wd1-s8-control"]
    for trial in trials:  # each as the launcher runs it, here in this process
        assert run_trial(trial)["action"] == "done"
    written = runner.run_phase("calibration", path=path)  # finished, not yet exported: exported, nothing launched
    assert sorted(written) == sorted(corpus / "calibration" / f"{trial.name}.json.gz" for trial in trials)
    digest = policy.sha256(path)
    for trial in trials:
        summary = read_summary(corpus / "calibration" / f"{trial.name}.json.gz")
        assert summary["registration"] == {"path": path.name, "sha256": digest}
        assert (summary["commit"], summary["uncommitted_changes"], summary["name"]) == (commit, False, trial.name)
        assert (summary["cell"], summary["seed"], summary["control"]) == (trial.tags["cell"], trial.tags["seed"],
                                                                          trial.tags["control"])
        assert summary["cpu_seconds"] > 0 and summary["overhead"]["setting"] == "measure"
        assert summary["overhead"]["shares"]["whole_run"]["cpu"] > 0  # capgeo's measured share
        assert summary["max_steps"] == 24 and summary["series"]["commutator/defect"][0][0] == 0
    assert read_summary(corpus / "calibration" / "sort-easy-b24-s8-control.json.gz")["shuffled_answers"]
    assert runner.run_phase("calibration", path=path) == []  # resumed: every twin exported, none run again
    assert len(analysis.twin_runs(runner.exported("calibration", path))) == 4
    fitted = runner.fit_calibration(path)
    assert fitted["calibration_runs"] == sorted(trial.name for trial in trials)
    with pytest.raises(SystemExit, match="start after the calibration fit"):
        runner.run_phase("heldout", path=path)


def test_an_export_names_the_clean_tree_it_ran_from(tmp_path: Path) -> None:
    """A twin made at another commit, or with uncommitted changes, or another overhead setting, is not exported."""
    path = filled(tmp_path, TINY_CELLS)
    found = json.loads(path.read_text())
    trial = runner.twin(found, TINY_CELLS[0], 7, False, "calibration", runs=tmp_path / "runs")
    version = trial.root / "version_0"
    version.mkdir(parents=True)
    record = {"steps": 24, "max_steps": 24, "stop_at_step": 24, "commit": "a" * 40, "uncommitted_changes": False,
              "overhead": {"setting": "measure"}, "series": {"acc": [[0, 0.0], [24, 0.1]]}}
    for change, message in (({}, "was made at a{40}"), ({"commit": "c" * 40, "uncommitted_changes": True},
                                                         r"uncommitted changes: True"),
                            ({"commit": "c" * 40, "overhead": {"setting": 0.03}}, "overhead budget 0.03")):
        (version / "capgeo_summary.json").write_text(json.dumps({**record, **change}))
        with pytest.raises(SystemExit, match=message):
            runner.export(trial, found, path, "c" * 40, folder=tmp_path / "corpus")
    (version / "capgeo_summary.json").write_text(json.dumps({**record, "commit": "c" * 40}))
    target = runner.export(trial, found, path, "c" * 40, folder=tmp_path / "corpus")
    assert read_summary(target)["registration"]["sha256"] == policy.sha256(path)
