"""The study's claims counted on constructed run summaries with known answers, and decided by the rule committed
in study/record/claims.py: too few runs, a tie or a single run is inconclusive, never a verdict."""

from __future__ import annotations

from pathlib import Path

from capgeo_callbacks.run.reading import RunRecord
from study.record.claims import BAND, MIN_N, claims, every_measure, main, share_verdict


def run(name: str, **fields: object) -> RunRecord:
    summary = {"task": "copy", "difficulty": "hard", "size": "xs", "parameters": 100, "acquisition_step": 500,
               "verdict": "precursor", "layers": {"norm_f": {"floor": 2.0}}, "layer_order_rho": -0.5,
               "logprob_emergence_step": 300, "acc_at_logprob_emergence": 0.01, "series": {},
               "measures": {"probe_acc/norm_f": {"precedes_acquisition": True},
                            "llc": {"precedes_acquisition": False}}}
    summary.update(fields)
    return RunRecord(name, None, Path(name), summary)


def by_claim(found: list) -> dict:
    return {c.claim.split(" (")[0]: c for c in found}


def test_claims_on_constructed_runs() -> None:
    records = [
        run("a"), run("b"), run("c", verdict="simultaneous", layer_order_rho=0.5),
        run("never", acquisition_step=None, verdict="not-acquired",
            measures={"llc": {"precedes_acquisition": None}, "probe_acc/norm_f": {"precedes_acquisition": None}}),
        run("mod1", task="mod", layers={"norm_f": {"floor": 2.1}}),
        run("mod2", task="mod", layers={"norm_f": {"floor": 1.9}}),
        run("easy", difficulty="easy", verdict="simultaneous"),
        run("control", verdict="precursor", negative_control="nothing to learn"),
        # a level no size learns still has a floor; a shuffled-answer run does not count
        run("mod3", task="mod", acquisition_step=None, verdict="not-acquired", negative_control="not learned",
            layers={"norm_f": {"floor": 2.3}}),
        run("mod4", task="mod", shuffled_answers=True, layers={"norm_f": {"floor": 9.0}}),
        # runs with every measure (the measures phase) enter the comparison of measures only, made on them alone
        *[run(f"measured{i}", measure_names=["rankme", "probes", "llc"], layer_order_rho=0.5) for i in range(3)],
    ]
    found = by_claim(claims(records))
    hard = found["RankMe collapse and recovery precede acquisition on hard tasks"]
    # 4 of 5: the interval [0.38, 0.96] straddles 0.8
    assert hard.n == 5 and hard.measured.startswith("4/5 = 0.80") and hard.verdict == "inconclusive"
    assert "at the rate observed (0.80)" in hard.decides
    easy = found["Easy tasks: no precursor"]
    assert easy.measured.startswith("1/1") and easy.n == 1 and easy.verdict == "inconclusive"  # n = 1: no verdict
    mod = found["mod collapses to a floor of about 2"]
    assert mod.measured.startswith("median 2.10 (range 1.90-2.30)") and mod.verdict == "inconclusive"
    assert mod.decides == "a 95% interval of the median needs at least 6 runs (now 3)"
    assert found["mul's collapse floor rises with capacity"].verdict == "inconclusive"
    top_down = found["The collapse runs top-down"]
    assert top_down.measured.startswith("5/6") and top_down.n == 6  # the control is left out
    only = found["Only RankMe is a reliable precursor among the measures"]
    assert only.verdict == "inconclusive" and only.n == 3 and "llc 0/3" in only.measured  # 3 runs: too few
    assert found["Log-prob emergence comes before accuracy acquisition"].measured.endswith(
        "median accuracy there 0.01 (the verdict is on 'earlier' alone)")
    assert {claim.verdict for claim in found.values()} <= {"reproduced", "contradicted", "inconclusive"}


def test_cli_writes_the_table(tmp_path: Path) -> None:
    from capgeo_callbacks.run.summary import write_summary

    write_summary(run("a").summary, tmp_path / "runs" / "a")
    found = main([str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    assert len(found) == 9
    assert "| claim | study |" in (tmp_path / "out" / "claims.md").read_text()


def test_small_models_predict_large_ones_on_the_runs_of_default_measures() -> None:
    curve = [[step, value] for step, value in zip(range(0, 1000, 50), [30, 12, 6, 5, 7, 10, 14, 18, 20, 21] * 2,
                                                   strict=False)]
    sized = {"series": {"rankme/norm_f": curve}, "max_steps": 1000}
    small, large = run("small", **sized), run("large", size="s", parameters=1000, **sized)
    found = by_claim(claims([small, large]))["Small models' RankMe curves predict larger ones'"]
    assert found.n == 1 and found.verdict == "inconclusive"  # the same curve, rho 1, but one task: no verdict
    measured = run("large", size="s", parameters=1000, measure_names=["rankme", "llc"], **sized)
    assert by_claim(claims([small, measured]))["Small models' RankMe curves predict larger ones'"].n \
        == 0  # a run with every measure enters only the comparison of measures


def test_a_share_of_runs_is_decided_by_its_interval() -> None:
    assert 1 - BAND == 0.8 and MIN_N == 5
    assert share_verdict(4, 4) == "inconclusive"  # too few, whatever they show
    assert share_verdict(5, 5) == "inconclusive"  # [0.57, 1.00] straddles 0.8
    assert share_verdict(16, 16) == "reproduced"  # [0.81, 1.00]
    assert share_verdict(1, 5) == "contradicted"  # [0.04, 0.62]
    assert share_verdict(17, 23) == "inconclusive"  # [0.54, 0.87]


def test_a_tie_between_measures_is_inconclusive_and_a_clear_lead_reproduces() -> None:
    def measured(name: str, llc: bool) -> RunRecord:
        return run(name, measure_names=["rankme", "probes", "llc"],
                   measures={"probe_acc/norm_f": {"precedes_acquisition": True}, "llc": {"precedes_acquisition": llc}})

    only = "Only RankMe is a reliable precursor among the measures"
    tie = by_claim(claims([measured(f"m{i}", True) for i in range(5)]))[only]
    assert tie.verdict == "inconclusive" and "would make it contradicted" in tie.decides  # 5/5 against 5/5
    lead = by_claim(claims([measured(f"m{i}", False) for i in range(16)]))[only]
    assert lead.verdict == "reproduced"  # RankMe 16/16 [0.81, 1], llc 0/16 [0, 0.19]
    both = by_claim(claims([measured(f"m{i}", True) for i in range(16)]))[only]
    assert both.verdict == "contradicted"  # llc is as reliable


def test_floors_are_decided_by_the_interval_of_the_median() -> None:
    near_two = [run(f"mod{i}", task="mod", layers={"norm_f": {"floor": 1.9 + 0.04 * i}}) for i in range(6)]
    assert by_claim(claims(near_two))["mod collapses to a floor of about 2"].verdict == "reproduced"
    far = [run(f"mod{i}", task="mod", layers={"norm_f": {"floor": 5.0 + 0.1 * i}}) for i in range(6)]
    assert by_claim(claims(far))["mod collapses to a floor of about 2"].verdict == "contradicted"
    mul = "mul's collapse floor rises with capacity"

    def sized(floors_xs: list[float], floors_s: list[float]) -> str:
        records = [run(f"xs{i}", task="mul", layers={"norm_f": {"floor": f}}) for i, f in enumerate(floors_xs)]
        records += [run(f"s{i}", task="mul", size="s", parameters=1000, layers={"norm_f": {"floor": f}})
                    for i, f in enumerate(floors_s)]
        return by_claim(claims(records))[mul].verdict

    assert sized([2.0, 2.1, 2.2], [3.0, 3.1, 3.2]) == "reproduced"
    assert sized([3.0, 3.1, 3.2], [2.0, 2.1, 2.2]) == "contradicted"
    assert sized([2.0, 2.1, 2.2], [3.0]) == "inconclusive"  # one run of size s


def test_a_rerun_counts_once() -> None:
    series = {"acc": [[0, 0.0], [100, 0.9]]}
    twice = [run("a", series=series), RunRecord("a", None, Path("other/a"), run("a", series=series).summary)]
    assert by_claim(claims(twice))["The collapse runs top-down"].n == 1


def test_a_run_at_the_default_preset_counts_with_the_rest_whatever_the_preset_held_then() -> None:
    # the committed corpus measured rankme and probes by default; train.py's default now adds ILDR and the weight norm
    assert not every_measure({"measure_names": ["rankme", "probes"]})
    assert not every_measure({"measure_names": ["rankme", "ildr", "probes", "weight_norm"]})
    assert every_measure({"measure_names": ["rankme", "probes", "grad_rank", "hessian", "llc"]})
    assert not every_measure({})
