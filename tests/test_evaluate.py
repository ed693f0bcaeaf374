"""The warning's scorer on constructed runs with known answers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from capgeo_callbacks.detection import DetectionSettings
from capgeo_callbacks.evaluate import (
    Rate,
    Rule,
    RunSeries,
    candidate_rules,
    choose,
    evaluate,
    learning_onset,
    loss_onset_alert,
    main,
    score,
    wilson,
    wins,
)
from capgeo_callbacks.summary import build_summary, write_summary

STEPS = list(range(0, 2000, 100))  # 20 evaluations
FLAT = [20.0] * 20
# collapses at step 500 (to 5), recovered by 800 (smoothing 3): the study's rule alerts at 800
DIP = [20.0] * 4 + [12.0, 5.0, 5.0, 9.0, 14.0, 18.0] + [20.0] * 10
LOW, HIGH = 0.0, 0.9


def acc_from(step: int | None) -> list[float]:
    """Accuracy 0 until ``step`` (acquisition there), 0.9 after; never if None."""
    return [HIGH if step is not None and s >= step else LOW for s in STEPS]


def logprob_from(step: int | None) -> list[float]:
    """-3.5 on the plateau, rising linearly from ``step`` to -0.1 over 500 steps."""
    if step is None:
        return [-3.5] * len(STEPS)
    return [-3.5 + min(1.0, max(0.0, (s - step) / 500)) * 3.4 for s in STEPS]


def run(name: str, rankme: list[float], acquisition: int | None, onset: int | None = None, seed: int = 0,
        control: bool = False) -> RunSeries:
    info = {"task": "t", "difficulty": "hard", "seed": seed, "max_steps": 2000, "warmup_steps": 100}
    return RunSeries(name, info, STEPS, acc_from(acquisition), {"norm_f": rankme}, logprob_from(onset), {}, control)


RUNS = [
    run("true precursor", DIP, acquisition=1500, onset=1000),  # alert 800, acquired 1500: a hit, lead 700
    run("false alarm", DIP, acquisition=None),  # alert, never acquired
    run("miss", FLAT, acquisition=1200, onset=900),  # acquired without an alert
    run("never acquired, quiet", FLAT, acquisition=None),
    run("alert after acquisition", DIP, acquisition=600, onset=300),  # acquired before recovery: no warning
    run("control", DIP, acquisition=None, control=True),  # a negative control that alerts
]


def test_wilson_interval_known_values() -> None:
    low, high = wilson(2, 6)
    assert (round(low, 2), round(high, 2)) == (0.10, 0.70)  # the audit's 2 of 6
    low, high = wilson(15, 15)
    assert high == 1.0 and low == pytest.approx(0.7961, abs=1e-4)
    assert wilson(0, 10)[0] == 0.0 and wilson(0, 0) is None
    # against the closed form for 7 of 20
    p, n, z = 7 / 20, 20, 1.959964
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert wilson(7, 20) == pytest.approx((centre - half, centre + half))
    assert str(Rate(2, 6)) == "2/6 = 0.33 [0.10, 0.70]" and str(Rate(0, 0)) == "— (n 0)"


def test_study_rule_on_constructed_runs() -> None:
    result = score(Rule("study"), RUNS)
    alerts = {o.run: o.alert for o in result["outcomes"]}
    assert alerts == {"true precursor": 800, "false alarm": 800, "miss": None, "never acquired, quiet": None,
                      "alert after acquisition": None, "control": 800}
    # alerted: true precursor, false alarm, control; acquired: true precursor, miss, alert after acquisition
    assert (result["precision"].k, result["precision"].n) == (1, 3)
    assert (result["recall"].k, result["recall"].n) == (1, 3)
    assert result["lead"] == {"n": 1, "median": 700.0, "q25": 700.0, "q75": 700.0}
    assert result["lead_fraction"]["median"] == pytest.approx(700 / 1500)
    onset = learning_onset(STEPS, logprob_from(1000))
    assert result["lead_over_onset"]["median"] == onset - 800
    assert (result["false_alarms_never_acquired"].k, result["false_alarms_never_acquired"].n) == (1, 2)
    assert (result["false_alarms_controls"].k, result["false_alarms_controls"].n) == (1, 1)
    assert result["f1"] == pytest.approx(1 / 3)


def test_baselines() -> None:
    clock = {o.run: o.alert for o in score(Rule("clock", "clock", clock=0.2), RUNS)["outcomes"]}
    assert clock["miss"] == 400 and clock["alert after acquisition"] == 400 and clock["false alarm"] == 400
    warmup = {o.run: o.alert for o in score(Rule("warm-up", "warmup"), RUNS)["outcomes"]}
    assert warmup["miss"] == 100 and warmup["never acquired, quiet"] == 100  # the warm-up each run records
    assert Rule("warm-up", "warmup").alert_step(RunSeries("no warm-up recorded", {}, STEPS, acc_from(None), {},
                                                          None)) is None
    loss = {o.run: o.alert for o in score(Rule("loss", "loss"), RUNS)["outcomes"]}
    assert loss["never acquired, quiet"] is None  # a flat log-prob never leaves its plateau
    assert loss["miss"] is not None and 900 < loss["miss"] < 1200  # leaves the plateau after onset at 900
    # log-prob -3.5 + 0.8 * 3.4 = -0.78 < log 0.5 at 1400, -0.1 at 1500: emergence at acquisition, no warning
    assert Rule("lp", "logprob").alert_step(RUNS[0]) == 1500
    assert score(Rule("lp", "logprob"), RUNS[:1])["outcomes"][0].alert is None
    probe = RunSeries("p", {"seed": 0, "max_steps": 2000}, STEPS, acc_from(1500), {"a": FLAT}, None,
                      {"a": [0.6 if s >= 1000 else 0.1 for s in STEPS]})
    assert Rule("probe", "probe").alert_step(probe) == 1000


def test_learning_onset_and_loss_alert() -> None:
    assert learning_onset(STEPS, logprob_from(None)) is None
    # plateau -3.5; best -0.1; 10% of the way is -3.16, reached at 1000 + 0.1 * 500 = 1050 -> step 1100
    assert learning_onset(STEPS, logprob_from(1000)) == 1100
    assert learning_onset(STEPS, None) is None
    assert loss_onset_alert(STEPS, logprob_from(None)) is None
    assert loss_onset_alert(STEPS, logprob_from(1000)) == 1200  # above -3.45 at 1100 and 1200


def test_candidates_choice_and_wins() -> None:
    rules = candidate_rules()
    assert rules[0].name == "study" and len({r.name for r in rules}) == len(rules)
    # two layers required: a run whose only collapsing layer is one of two does not alert
    two = [RunSeries("one layer drifts", {"seed": 0}, STEPS, acc_from(None), {"a": DIP, "b": FLAT}, None)]
    assert score(Rule("study"), two)["outcomes"][0].alert == 800
    required = next(r for r in rules if r.settings.layers_required == 2 and r.settings.guard_steps == 0
                    and not r.settings.noise_units and not r.settings.min_recovery)
    assert score(required, two)["outcomes"][0].alert is None
    chosen, scores = choose([Rule("study"), Rule("clock", "clock")], RUNS)
    assert chosen.name in {"study", "clock"} and len(scores) == 2
    better = {"f1": 0.5, "precision": Rate(1, 2)}
    assert wins(better, {"f1": 0.4, "precision": Rate(1, 2)})
    assert not wins(better, {"f1": 0.4, "precision": Rate(2, 3)})


def test_evaluate_selects_on_some_seeds_and_reports_on_others(tmp_path: Path) -> None:
    runs = [run(f"{r.name} s{seed}", r.rankme["norm_f"], None, seed=seed) for seed in (0, 1, 2) for r in RUNS[:2]]
    result = evaluate(runs, [0, 1], [2], rules=[Rule("study"), Rule("guarded", settings=DetectionSettings(
        guard_steps=1000))])
    assert result["runs"] == {"all": 6, "selection": 4, "holdout": 2}
    assert result["chosen"] in {"study", "guarded"}


def test_cli_on_summaries_written_by_the_summary_builder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for seed in (0, 1, 2):
        for name, rankme, acquisition in (("precursor", DIP, 1500), ("quiet", FLAT, None)):
            summary = build_summary(
                acc=[[s, a] for s, a in zip(STEPS, acc_from(acquisition), strict=True)],
                series={"rankme/norm_f": [[s, v] for s, v in zip(STEPS, rankme, strict=True)]},
                settings=DetectionSettings(), logprob_key="val/logprob",
                logprob=[[s, v] for s, v in zip(STEPS, logprob_from(1000 if acquisition else None), strict=True)],
                run_info={"task": name, "difficulty": "hard", "seed": seed, "max_steps": 2000})
            write_summary(summary, tmp_path / f"{name}-s{seed}" / "version_0")
    result = main([str(tmp_path), "--out", str(tmp_path / "eval")])
    assert result["runs"] == {"all": 6, "selection": 4, "holdout": 2}
    study = result["holdout"][0]
    assert study["rule"] == "study" and (study["precision"].k, study["precision"].n) == (1, 1)
    assert (study["recall"].k, study["recall"].n) == (1, 1)
    assert "| study | 1/1 = 1.00" in capsys.readouterr().out
    saved = json.loads((tmp_path / "eval" / "evaluation.json").read_text())
    assert saved["holdout"][0]["precision"] == {"k": 1, "n": 1, "value": 1.0, "interval": list(wilson(1, 1))}
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--select-seeds", "0", "--holdout-seeds", "0"])
