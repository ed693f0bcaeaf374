"""The twins' analysis on synthetic twins with known answers: a geometry built to carry what the base series do not
makes the endpoint "adds"; a geometry of pure noise does not; grouped cross-validation keeps a run's rows in one
fold; the frozen fit survives JSON; the geometric features do not see a task's scale of RankMe."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from capgeo_callbacks.scoring.leads import RuleGrid, rule_leads
from capgeo_callbacks.scoring.paired import Difference
from study.phases import twins_analysis as twins
from study.record import twins_report

BUDGET, EVERY, WARMUP = 400, 10, 40


def twin(cell: str, seed: int, informative: bool, control: bool = False, carrier: str = "rankme") -> dict[str, Any]:
    """A synthetic twin: it acquires (after half its budget) when ``z_loss + z_geometry > 0``; its validation and
    training losses fall at a rate set by ``z_loss``, its RankMe (two layers) at one set by ``z_geometry`` when
    ``informative``, else by noise of its own; the accuracy, probe and weight norm say nothing early. With
    ``carrier="commutator"`` the commutator defect (every other evaluation) rises at the rate set by ``z_geometry``,
    with ``carrier="ildr"`` ILDR (two layers) does, and RankMe by noise."""
    rng = np.random.default_rng([seed, *map(ord, cell)])
    z_loss, z_geometry, noise = rng.normal(size=3)
    acquires = not control and z_loss + z_geometry > 0
    at = int(220 + 60 * rng.random()) // EVERY * EVERY if acquires else None
    steps = range(0, BUDGET + 1, EVERY)
    share = np.array(steps) / BUDGET
    signal = z_geometry if informative else noise
    rate = 1.0 + 0.8 * (signal if carrier == "rankme" else noise)
    loss = 3.0 * np.exp(-(0.6 + 0.3 * z_loss) * share) * np.exp(rng.normal(0, 0.01, len(share)))
    series = {
        "acc": [[s, 0.9 if at is not None and s >= at else float(0.02 * rng.random())] for s in steps],
        "val/loss": [[s, float(v)] for s, v in zip(steps, loss, strict=True)],
        "train/loss": [[s, float(v * 0.97)] for s, v in zip(steps, loss, strict=True) if s > 0],
        "weight_norm/global": [[s, float(20 + s / BUDGET + rng.normal(0, 0.05))] for s in steps],
        "lr": [[s, 1e-3 * min(1.0, s / WARMUP)] for s in steps],
        "probe_acc/blocks.1": [[s, float(0.25 + 0.02 * rng.random())] for s in steps[::4]],
    }
    for layer, scale in (("blocks.0", 7.0), ("blocks.1", 14.0)):
        values = scale * np.exp(-rate * share) * np.exp(rng.normal(0, 0.01, len(share)))
        series[f"rankme/{layer}"] = [[s, float(v)] for s, v in zip(steps, values, strict=True)]
    if carrier == "ildr":
        for layer, scale in (("blocks.0", 1.5), ("blocks.1", 4.0)):
            values = scale * np.exp((1.0 + 0.8 * signal) * share) * np.exp(rng.normal(0, 0.01, len(share)))
            series[f"ildr/{layer}"] = [[s, float(v)] for s, v in zip(steps, values, strict=True)]
    if carrier == "commutator":
        defect = 0.3 * np.exp((1.0 + 0.8 * signal) * share) * np.exp(rng.normal(0, 0.01, len(share)))
        series["commutator/defect"] = [[s, float(v)] for s, v in list(zip(steps, defect, strict=True))[::2]]
    return {"name": f"{cell}-s{seed}{'-control' if control else ''}", "cell": cell, "seed": seed,
            "max_steps": BUDGET, "warmup_steps": WARMUP, "steps": BUDGET, "shuffled_answers": control,
            "acquisition_step": at, "series": series}


def twins_of(informative: bool, seeds: range, cells: tuple[str, ...] = ("sort-medium-b400", "grok-add-f0.45-wd1"),
             controls: int = 0, carrier: str = "rankme") -> list[dict[str, Any]]:
    return [twin(cell, seed, informative, control=seed < seeds.start + controls and controls > 0, carrier=carrier)
            for cell in cells for seed in seeds]


@pytest.fixture(scope="module")
def informative() -> tuple[list, list, dict]:
    calibration, heldout = twins_of(True, range(0, 30)), twins_of(True, range(100, 140))
    return calibration, heldout, twins.fit(calibration, landmarks=(0.25,))


def test_a_geometry_that_carries_what_the_base_does_not_adds(informative: tuple[list, list, dict]) -> None:
    _, heldout, frozen = informative
    found = twins.endpoints(frozen, twins.twin_runs(heldout), margin=0.02, shares=(0.25,), resamples=2000)
    for scope in ("tasks", "grokking", "pooled"):
        entry = found[scope]["0.25"]
        assert entry["decision"][0] == twins.ADDS, (scope, entry["log_loss"])
        assert entry["log_loss"].low > 0 and entry["auroc"].value > 0
    assert found["pooled"]["0.25"]["n"] == 80 and found["tasks"]["0.25"]["n"] == 40
    assert set(found["pooled"]["0.25"]["cells"]) == {"sort-medium-b400", "grok-add-f0.45-wd1"}


def test_a_commutator_defect_that_carries_what_the_base_does_not_adds() -> None:
    """RankMe is noise here and the defect's rise carries the outcome: the geometry model adds, by the defect."""
    calibration = twins_of(True, range(0, 30), carrier="commutator")
    heldout = twins_of(True, range(100, 140), carrier="commutator")
    frozen = twins.fit(calibration, landmarks=(0.25,))
    found = twins.endpoints(frozen, twins.twin_runs(heldout), margin=0.02, shares=(0.25,), resamples=2000)
    assert found["pooled"]["0.25"]["decision"][0] == twins.ADDS, found["pooled"]["0.25"]["log_loss"]
    model = frozen["fits"]["0.25"]["models"]["geometry"]
    weights = dict(zip(model["features"], np.abs(model["coef"]), strict=True))
    assert max(twins.GEOMETRY, key=weights.__getitem__) == "commutator_change"
    assert frozen["fits"]["0.25"]["imputed"]["missing_commutator"] == 0


def test_the_commutator_change_is_its_log_rise_since_its_early_value_and_flagged_where_missing() -> None:
    summary = twin("sort-medium-b400", 4, True, carrier="commutator")
    run = twins.twin_run(summary)
    assert run is not None
    view = run.view.prefix(16)  # steps 0-150; the defect at 0, 20, ..., 140; the warm-up ends at 40
    defect = dict(map(tuple, summary["series"]["commutator/defect"]))
    expected = math.log(np.mean([defect[100], defect[120], defect[140]]) / defect[40])
    assert twins.landmark_features(view, BUDGET)["commutator_change"] == pytest.approx(expected, rel=1e-12)
    scaled = json.loads(json.dumps(summary))
    scaled["series"]["commutator/defect"] = [[step, 1e3 * value] for step, value in defect.items()]
    again = twins.twin_run(scaled).view.prefix(16)  # type: ignore[union-attr]
    assert twins.landmark_features(again, BUDGET)["commutator_change"] == pytest.approx(expected, rel=1e-9)
    without = twins.landmark_features(twins.twin_run(twin("sort-medium-b400", 4, True)).view, BUDGET)  # type: ignore
    row = dict(zip(twins.MODELS["geometry"], twins.vector(without, twins.MODELS["geometry"]), strict=True))
    assert math.isnan(without["commutator_change"]) and row["missing_commutator"] == 1.0
    assert row["commutator_change"] == 0.0 and row["missing_rankme"] == 0.0


def test_only_the_signal_that_carries_the_outcome_adds_alone() -> None:
    """ILDR carries what the base does not, RankMe and the probe are noise, no twin records the commutator defect:
    base+ildr adds in each family and pooled, base+rankme and base+probe do not, base+commutator is inconclusive
    (nothing recorded to judge), each with n and its interval beside the primary's."""
    calibration = twins_of(True, range(0, 30), carrier="ildr")
    heldout = twins_of(True, range(100, 140), carrier="ildr")
    frozen = twins.fit(calibration, landmarks=(0.25,))
    found = twins.endpoints(frozen, twins.twin_runs(heldout), margin=0.02, shares=(0.25,), resamples=2000)
    for scope in ("tasks", "grokking", "pooled"):
        entry = found[scope]["0.25"]
        assert set(entry["secondary"]) == set(twins.SIGNAL_MODELS) == {"base+rankme", "base+probe", "base+ildr",
                                                                         "base+commutator"}
        ildr, rankme = entry["secondary"]["base+ildr"], entry["secondary"]["base+rankme"]
        assert ildr["decision"][0] == twins.ADDS and ildr["log_loss"].low > 0, (scope, ildr["log_loss"])
        assert ildr["auroc"].low > 0 and ildr["brier"].low > 0 and ildr["recorded"] == entry["n"]
        assert rankme["decision"][0] != twins.ADDS and rankme["log_loss"].low < 0, (scope, rankme["log_loss"])
        assert entry["secondary"]["base+probe"]["decision"][0] != twins.ADDS
        commutator = entry["secondary"]["base+commutator"]
        assert commutator["recorded"] == 0 and commutator["decision"][0] == twins.INCONCLUSIVE
        assert entry["decision"][0] == twins.ADDS  # the primary: every signal together
        for result in entry["secondary"].values():
            assert result["log_loss"].n == result["brier"].n == result["auroc"].n == entry["n"]
    assert found["pooled"]["0.25"]["n"] == 80


def test_pure_noise_geometry_adds_nothing_it_is_sure_of() -> None:
    calibration, heldout = twins_of(False, range(0, 30)), twins_of(False, range(100, 140))
    frozen = twins.fit(calibration, landmarks=(0.25,))
    runs = twins.twin_runs(heldout)
    entry = twins.compare(frozen, runs, 0.25, resamples=2000)
    difference = entry["log_loss"]
    assert difference.low < 0.02 and abs(difference.value) < 0.1, difference
    assert twins.decide(difference, margin=0.02)[0] != twins.ADDS
    assert twins.decide(difference, margin=0.5)[0] == twins.NOTHING  # a wide margin: the interval lies below it


def test_grouped_folds_never_split_a_run() -> None:
    groups = [f"run{k // 3}" for k in range(60)]  # three rows a run
    outcomes = [int(k // 3 % 2 == 0) for k in range(60)]
    folds = twins.cv_folds(outcomes, groups, folds=5)
    assert len(folds) == 5
    for train, test in folds:
        assert not {groups[i] for i in train} & {groups[i] for i in test}
        assert {outcomes[i] for i in test} == {0, 1}
    assert sorted(i for _, test in folds for i in test) == list(range(60))
    assert twins.cv_folds([1, 0, 0], ["a", "b", "c"]) == []  # one run of a kind: no cross-validation


def test_the_frozen_fit_round_trips_through_json(informative: tuple[list, list, dict]) -> None:
    """Every model, the two primary and each signal alone, is frozen with its features, on the one set of folds the
    fit records, and predicts the same after JSON."""
    calibration, heldout, frozen = informative
    thawed = json.loads(json.dumps(frozen))
    assert thawed == frozen
    entry = thawed["fits"]["0.25"]
    assert list(entry["models"]) == ["base", "geometry", "base+rankme", "base+probe", "base+ildr", "base+commutator"]
    model = entry["models"]["geometry"]
    assert model["C"] in twins.C_GRID and model["folds"] == 5 and len(model["coef"]) == len(twins.MODELS["geometry"])
    assert entry["models"]["base+ildr"]["features"] == [*twins.BASE, "missing_base", "ildr_change_last",
                                                        "ildr_change_mean", "missing_ildr"]
    for name, found in entry["models"].items():
        assert found["features"] == list(twins.MODELS[name]) and len(found["coef"]) == len(found["features"])
        assert found["folds"] == len(entry["validation_folds"]) == 5 and set(found["cv_log_loss"]) == \
            {f"{c:.6g}" for c in twins.C_GRID}
    kept = twins.population(twins.twin_runs(calibration), 0.25)[0]
    names = [run.name for run, *_ in kept]  # in the fit's order: the same rows give the same fits
    assert sorted(name for fold in entry["validation_folds"] for name in fold) == sorted(names)  # each in one fold
    # the recorded folds are the ones every model was cross-validated on: base+rankme's chosen C, recomputed
    rows = {run.name: (twins.vector(run.features(end), twins.MODELS["base+rankme"]), int(positive))
            for run, end, positive in kept}
    chosen = entry["models"]["base+rankme"]
    out_of_fold = []
    for fold in entry["validation_folds"]:
        train = [name for name in names if name not in fold]
        fitted = twins._pipeline(chosen["C"]).fit(np.array([rows[n][0] for n in train]), [rows[n][1] for n in train])
        test = [name for name in names if name in fold]
        out_of_fold += zip([rows[n][1] for n in test], fitted.predict_proba(np.array([rows[n][0] for n in test]))[:, 1],
                           strict=True)
    y, p = np.array(out_of_fold).T
    expected = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    assert chosen["cv_log_loss"][f"{chosen['C']:.6g}"] == pytest.approx(expected, rel=1e-9)
    for summary in heldout[:5]:
        for name in twins.MODELS:
            p = twins.predict(thawed, summary, 0.25, name)
            assert p == twins.predict(frozen, summary, 0.25, name) and 0 < p < 1  # type: ignore[operator]
    assert twins.predict(thawed, heldout[0], 0.1) is None  # no models at an unfitted landmark


def test_geometric_features_do_not_see_a_task_scale_of_rankme() -> None:
    summary = twin("sort-medium-b400", 7, True)
    scaled = json.loads(json.dumps(summary))
    for tag, points in scaled["series"].items():
        if tag.startswith("rankme/"):
            scaled["series"][tag] = [[step, 10 * value] for step, value in points]
    for share in twins.LANDMARKS:
        found = [twins.landmark_features(run.view.prefix(twins.population([run], share)[0][0][1]), BUDGET)
                 for run in twins.twin_runs([summary, scaled])]
        for name in twins.RANKME_FEATURES:
            assert found[0][name] == pytest.approx(found[1][name], abs=1e-12), name


def test_early_value_waits_for_the_warm_up_and_missing_series_are_flagged() -> None:
    run = twins.twin_run(twin("sort-medium-b400", 1, True))
    assert run is not None
    view = run.view.prefix(3)  # steps 0, 10, 20: the warm-up (40 steps) still lasts
    assert twins.early_index(view) == 2
    features = twins.landmark_features(view, BUDGET)
    assert features["rankme_change_last"] == 0.0 and math.isnan(features["ildr_change_last"])
    row = dict(zip(twins.MODELS["geometry"], twins.vector(features, twins.MODELS["geometry"]), strict=True))
    assert row["missing_ildr"] == 1.0 and row["ildr_change_last"] == 0.0 and row["missing_rankme"] == 0.0
    assert twins.early_index(run.view) == 4  # step 40


@pytest.mark.parametrize(("difference", "decision"), [
    (Difference("log_loss", 50, value=0.05, low=0.01, high=0.09), twins.ADDS),
    (Difference("log_loss", 50, value=0.0, low=-0.01, high=0.015), twins.NOTHING),
    (Difference("log_loss", 50, value=0.01, low=-0.01, high=0.04), twins.INCONCLUSIVE),
    (Difference("log_loss", 1, value=0.3, low=0.3, high=0.3), twins.INCONCLUSIVE),  # n = 1
    (Difference("log_loss", 50, value=0.0, low=0.0, high=0.0), twins.INCONCLUSIVE),  # a tie
    (Difference("log_loss", 0), twins.INCONCLUSIVE),
])
def test_the_decision_rule(difference: Difference, decision: str) -> None:
    assert twins.decide(difference, margin=0.02)[0] == decision


def test_rules_get_an_operating_point_on_calibration_and_a_lead_held_out(
        informative: tuple[list, list, dict]) -> None:
    calibration, heldout, _ = informative
    cal = twins.twin_runs(calibration + [twin("sort-medium-b400", 90, True, control=True)])
    held = twins.twin_runs(heldout)
    grids = [RuleGrid("rankme-fall", {"fall": (0.2, 0.3, 0.5), "ignore_steps": (0, 50)}, geometric=True),
             RuleGrid(twins.VAL_LOSS_RULE, {"fall": (0.2, 0.3), "held": (1, 3)}),
             RuleGrid("ildr-rise", {"multiple": (2.0, 3.0)}, geometric=True)]  # no twin records ILDR
    leads = twins.rule_leads(grids, cal, held)
    assert [entry["lead"] for entry in leads] == rule_leads(grids, cal, held)  # the library's one function
    assert twins.best_geometric(leads) == "rankme-fall"
    unread = leads.pop()  # read by no twin: no point chosen, shown at its default, warning no one
    assert not unread["lead"].chosen and unread["lead"].calibration.left_out == len(cal)
    assert str(unread["point"]).startswith("none of 2 within the cap; at its default (multiple=2.5)")
    assert set(unread["heldout_lead_shares"].values()) == {0.0}
    shares = list(leads[0]["heldout_lead_shares"].values())
    assert twins.lead_difference([*leads, unread], "rankme-fall", "ildr-rise", held, resamples=200).value == \
        pytest.approx(sum(shares) / len(shares))
    rankme, loss = leads
    point = rankme["point"]
    assert rankme["lead"].chosen and point.false_alarms.k <= 0.2 * point.false_alarms.n and point.controls.k == 0
    # every twin's validation loss falls steadily, those that never acquire too: no point within the cap
    assert not loss["lead"].chosen and loss["lead"].settings == {"fall": 0.1, "held": 3}
    assert loss["lead"].calibration.false_alarms.k > 0.2 * loss["lead"].calibration.false_alarms.n
    for entry in leads:
        assert set(entry["heldout_lead_shares"]) == {r.name for r in held if r.acquisition is not None}
        assert entry["heldout"]["recall"] == entry["lead"].heldout.warned
    difference = twins.lead_difference(leads, "rankme-fall", twins.VAL_LOSS_RULE, held, resamples=500)
    assert difference.n == sum(r.acquisition is not None for r in held) and difference.value is not None


def test_the_default_rules_are_the_librarys_grids() -> None:
    names = [grid.name for grid in twins.default_rules()]
    assert twins.VAL_LOSS_RULE in names
    assert {"rankme-recovery", "rankme-fall", "probe-crossing", "ildr-rise", "commutator-rise"} <= set(names)
    assert all(grid.make(point).name == grid.name for grid in twins.default_rules() for point in grid.points()[:1])


# -- the faults mended before any fit (each test failed before its mend) --------------------------------------------


def test_each_fold_is_standardised_with_its_own_training_rows() -> None:
    """The penalty is chosen by out-of-fold log losses in which each fold's scaling saw only its training rows."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(5)
    x = np.column_stack([rng.normal(size=40), rng.lognormal(0, 1.5, 40), np.full(40, 3.0)])  # skewed; constant
    y = (x[:, 0] + 0.3 * rng.normal(size=40) > 0).astype(int)
    groups = [f"run{k // 2}" for k in range(40)]
    found = twins.fit_logistic(x, y, groups, grid=(0.01, 1.0), folds=4)
    for c in (0.01, 1.0):
        out_of_fold = np.empty(40)
        for train, test in twins.cv_folds(y, groups, 4):
            model = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=10_000)).fit(x[train], y[train])
            out_of_fold[test] = model.predict_proba(x[test])[:, 1]
        expected = -np.mean(y * np.log(out_of_fold) + (1 - y) * np.log(1 - out_of_fold))
        assert found["cv_log_loss"][f"{c:.6g}"] == pytest.approx(expected, rel=1e-9)
    assert found["scale"][2] == 1.0 and found["mean"][2] == 3.0  # a constant column: centred, left unscaled
    assert found["mean"][1] == pytest.approx(x[:, 1].mean())  # the frozen model: scaled on every row


def test_a_twin_is_a_record_of_its_own() -> None:
    """A twin keeps its cell and family in fields of their own and its summary unchanged; the training loss's
    features are read from the training loss itself."""
    summary = {**twin("sort-medium-b400", 3, True), "task": "sort", "difficulty": "medium"}
    run = twins.twin_run(summary)
    assert isinstance(run, twins.TwinRun) and run.cell == "sort-medium-b400" and run.family == "tasks"
    assert run.seed == 3 and run.summary is summary and run.view.info["task"] == "sort"
    assert run.group == "sort-medium-b400/tasks"
    view = run.view
    train = np.array(view.values("train/loss"))
    features = twins.landmark_features(view, BUDGET)
    expected = math.log(train[np.isfinite(train)][0]) - np.log(train[-3:]).mean()
    assert features["train_loss_drop"] == pytest.approx(expected, rel=1e-12)
    assert features["train_loss_drop"] != pytest.approx(features["val_loss_drop"], rel=1e-6)
    grok = twins.twin_run({**twin("grok-add-f0.45-wd1", 3, True), "control": True, "shuffled_answers": False})
    assert grok is not None and grok.family == "grokking" and grok.control


def test_a_runs_features_are_computed_once_per_landmark(informative: tuple[list, list, dict],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Both models, every family and the pooled scope read each run's features at a landmark once."""
    _, heldout, frozen = informative
    calls: list[int] = []
    computed = twins.landmark_features
    monkeypatch.setattr(twins, "landmark_features", lambda view, budget: calls.append(1) or computed(view, budget))
    runs = twins.twin_runs(heldout)
    found = twins.endpoints(frozen, runs, margin=0.02, shares=(0.25,), resamples=200)
    assert len(calls) == found["pooled"]["0.25"]["n"] == len(twins.population(runs, 0.25)[0])


def test_the_page_says_plainly_when_there_are_no_twins() -> None:
    text = twins_report.twins_page([], [], None, None)
    assert "No twin has been run yet" in text and "no decision" in text
    assert "the registration is not committed yet: nothing is registered" in text and "## What is" not in text


def test_before_any_twin_the_page_says_what_is_registered() -> None:
    registration = json.loads(twins_report.DRAFT.read_text())
    del registration["DRAFT"]
    registration["cells"] = [
        {"cell": "sort-medium-b450", "family": "tasks", "argv": ["--task", "sort", "--difficulty", "medium",
                                                                 "--max-steps", "450"]},
        {"cell": "grok-add-f0.45-wd1", "family": "grokking", "config": {"operation": "add", "fraction": 0.45,
                                                                        "weight_decay": 1.0, "max_steps": 2100}}]
    text = twins_report.twins_page([], [], None, registration)
    assert "No twin has been run yet" in text and "the registration is committed" in text
    assert "| sort-medium-b450 | tasks | 450 | 12 + 2 | 24 + 2 |" in text
    assert "| grok-add-f0.45-wd1 | grokking | 2100 | 12 + 2 | 24 + 2 |" in text
    assert "Landmarks at 10%, 25%, 50% of the budget, 25% primary; the decision's margin: 0.02 nats" in text
    assert "commutator-rise" in text and text.endswith("<!-- end generated -->")
    drafted = twins_report.twins_page([], [], None, json.loads(twins_report.DRAFT.read_text()))
    assert "## What is drafted (DRAFT, not registered)" in drafted and "No cell filled in yet." in drafted


def test_the_page_holds_the_decision_per_family(informative: tuple[list, list, dict]) -> None:
    calibration, heldout, frozen = informative
    registration = json.loads(twins_report.DRAFT.read_text())
    text = twins_report.twins_page(calibration, heldout, frozen, registration, shares=(0.25,), resamples=500,
                                   rules=[RuleGrid("rankme-fall", {"fall": (0.2, 0.3, 0.5), "ignore_steps": (0, 50)},
                                                   geometric=True)])
    assert "| tasks | 25% |" in text and "adds" in text
    assert "DRAFT" in text  # judged against a draft's margin: said so
    leads = text.split("## The rules' leads at matched false alarms")[1]
    assert "| rule | operating point (chosen on calibration) |" in leads  # the library's leads table
    assert "| rankme-fall | fall=" in leads and "**rankme-fall**" in leads


def test_the_page_shows_each_signal_alone_beside_the_primary_with_n(informative: tuple[list, list, dict]) -> None:
    calibration, heldout, frozen = informative
    text = twins_report.twins_page(calibration, heldout, frozen, json.loads(twins_report.DRAFT.read_text()),
                                   shares=(0.25,), resamples=300, rules=[])
    section = text.split("## Each geometric signal alone (secondary)")[1].split("## Single series")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 3 * 5  # tasks, grokking, pooled: the primary's row, then each signal's
    found = twins.endpoints(frozen, twins.twin_runs(heldout), 0.02, (0.25,), resamples=300)
    for scope, n in (("tasks", 40), ("grokking", 40), ("pooled", 80)):
        entry = found[scope]["0.25"]
        ours = [row for row in rows if row.startswith(f"| {scope} | 25% |")]
        assert [row.split(" | ")[2] for row in ours] == ["`geometry` (primary)", *(f"`{name}`" for name in
                                                                                   twins.SIGNAL_MODELS)]
        for row, result in zip(ours, [entry, *entry["secondary"].values()], strict=True):
            assert f"{result['log_loss']}" in row and f"(n={n})" in row and f"**{result['decision'][0]}**" in row
            assert f"{result['auroc']}" in row and f"{result['brier']}" in row
    pooled_rankme = next(row for row in rows if row.startswith("| pooled | 25% | `base+rankme` |"))
    assert "**adds**" in pooled_rankme  # the carrier here is RankMe
    assert "Every cell holds at least 2 twins of each kind at each landmark" in text


def test_a_family_with_fewer_than_two_cells_holding_both_kinds(informative: tuple[list, list, dict]) -> None:
    """The short-cell rule: a cell with fewer than 2 twins of a kind keeps its runs in the log loss and Brier and adds
    no pair to the AUROC within cell; the page names it with its counts; a family with fewer than 2 cells holding
    both kinds at 25% has its AUROC-based targets inconclusive, its log-loss decision judged as ever."""
    _, heldout, frozen = informative
    short = [summary for summary in twins_of(True, range(100, 140), cells=("compare-hard-b400",))
             if summary["acquisition_step"] is None][:12]
    short.append(next(summary for summary in twins_of(True, range(100, 140), cells=("compare-hard-b400",))
                      if summary["acquisition_step"] is not None))  # one acquirer: short of a kind
    runs = twins.twin_runs(heldout + short)
    found = twins.endpoints(frozen, runs, margin=0.02, shares=(0.25, 0.5), resamples=500)
    tasks = found["tasks"]["0.25"]
    assert tasks["cells"]["compare-hard-b400"] == [1, 12] and tasks["short_cells"] == {"compare-hard-b400": [1, 12]}
    assert tasks["holding_both"] == ["sort-medium-b400"]
    assert tasks["log_loss"].n == tasks["brier"].n == 40 + 13 and tasks["auroc"].n == 40  # no pair from the short one
    alone = twins.compare(frozen, [run for run in runs if run.cell == "sort-medium-b400"], 0.25, resamples=500)
    assert tasks["auroc"].value == pytest.approx(alone["auroc"].value)
    assert tasks["secondary"]["base+ildr"]["auroc"].n == 40
    assert tasks["decision"][0] == twins.ADDS  # the primary decision needs no pair
    assert "1 of its cells holds at least 2 twins of each kind" in twins.auroc_short(found, "tasks")  # type: ignore
    assert twins.auroc_short(found, "grokking") is not None  # one grokking cell
    two = twins.endpoints(frozen, twins.twin_runs(heldout + twins_of(True, range(100, 140), cells=(
        "compare-hard-b400",))), margin=0.02, shares=(0.25,), resamples=200)
    assert twins.auroc_short(two, "tasks") is None and two["tasks"]["0.25"]["auroc"].n == 80
    targets = json.loads(twins_report.DRAFT.read_text())["targets"]
    lines = twins_report.targets_section(found, [], None, None, targets)
    assert lines[0].startswith("- tasks: ") and "**inconclusive (1 of its cells holds" in lines[0]
    assert "short-cell rule" in lines[0] and "**inconclusive (" in lines[-1]  # grokking at half the budget too
    said = twins_report.short_cells(found)
    assert "compare-hard-b400 at 25% (1 acquire later, 12 never)" in said and "no pair to the AUROC" in said


def test_each_model_is_set_beside_the_constant_that_reads_nothing(informative: tuple[list, list, dict]) -> None:
    """The trivial baseline: the calibration rows' rate of acquiring later, given to every run. A model made that
    constant gains exactly 0 over it; models that read an informative geometry (and base) beat it; the page shows it."""
    calibration, heldout, frozen = informative
    entry = frozen["fits"]["0.25"]
    rate = twins.calibration_rate(frozen, 0.25)
    assert rate == entry["acquire_later"] / (entry["acquire_later"] + entry["never"])
    runs = twins.twin_runs(heldout)
    found = twins.compare(frozen, runs, 0.25, resamples=500)["against_constant"]
    assert found["geometry"].low > 0  # the geometry carries the outcome: it beats the constant
    assert found["base"].first == found["geometry"].first  # one constant, one log loss, for both
    flat = json.loads(json.dumps(frozen))
    base = flat["fits"]["0.25"]["models"]["base"]
    base["coef"] = [0.0] * len(base["coef"])
    base["intercept"] = float(np.log(rate / (1 - rate)))  # the constant itself
    same = twins.compare(flat, runs, 0.25, resamples=500)["against_constant"]["base"]
    assert same.value == pytest.approx(0.0, abs=1e-12) and same.low == pytest.approx(0.0, abs=1e-12)
    text = twins_report.twins_page(calibration, heldout, frozen, json.loads(twins_report.DRAFT.read_text()),
                                   shares=(0.25,), resamples=200, rules=[])
    assert "## Against a constant (exploratory, added after the registration)" in text
    assert "| pooled | 25% |" in text.split("## Against a constant")[1].split("##")[0]


def test_the_readme_line_says_each_familys_decision_the_constant_and_the_targets(
        informative: tuple[list, list, dict], monkeypatch: pytest.MonkeyPatch) -> None:
    calibration, heldout, frozen = informative
    registration = json.loads(twins.REGISTRATION.read_text())
    monkeypatch.setattr(twins_report, "committed", lambda: (calibration, heldout, frozen, registration))
    monkeypatch.setattr(twins, "default_rules", lambda: [RuleGrid("rankme-fall", {"fall": (0.2, 0.5)},
                                                                  geometric=True)])
    twins_report.page.cache_clear()
    try:
        line = twins_report.readme_line()
    finally:
        twins_report.page.cache_clear()
    assert line.startswith("**What the geometry adds** ([docs/twins.md](docs/twins.md)). 80 registered held-out twins")
    for scope in ("tasks", "grokking", "pooled"):
        assert f"{scope}: **adds**" in line  # the synthetic geometry carries the outcome
    assert "base + geometry's +" in line  # it beats the constant
    assert "Of the 4 registered targets:" in line


def test_a_held_out_phase_short_of_its_registered_runs_is_said_interim(informative: tuple[list, list, dict]) -> None:
    calibration, heldout, frozen = informative
    registration = json.loads(twins.REGISTRATION.read_text())
    planned = twins_report.registered_count(registration, "heldout")
    assert planned == len(registration["cells"]) * (24 + 2)
    said = twins_report.unfinished(heldout[:10], registration)
    assert f"10 of its {planned} registered runs are in" in said and "interim" in said
    assert twins_report.unfinished([{}] * planned, registration) == ""
    text = twins_report.twins_page(calibration, heldout[:10], frozen, registration, shares=(0.25,), resamples=200,
                                   rules=[])
    assert "**The held-out phase is not finished: 10 of" in text
