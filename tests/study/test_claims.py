"""The study's claims counted on constructed run summaries with known answers."""

from __future__ import annotations

from pathlib import Path

from capgeo_callbacks.run.reading import RunRecord
from study.record.claims import claims, main


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
    # 4 of 5: the interval [0.38, 0.96] leaves out the study's 100%
    assert hard.n == 5 and hard.measured.startswith("4/5 = 0.80") and hard.verdict == "not reproduced"
    assert found["Easy tasks: no precursor"].measured.startswith("1/1") and found["Easy tasks: no precursor"].n == 1
    assert found["mod collapses to a floor of about 2"].measured.startswith("median 2.10 (range 1.90-2.30)")
    assert found["mod collapses to a floor of about 2"].verdict == "reproduced"
    assert found["mul's collapse floor rises with capacity"].verdict == "not testable"
    top_down = found["The collapse runs top-down"]
    assert top_down.measured.startswith("5/6") and top_down.n == 6  # the control is left out
    only = found["Only RankMe is a reliable precursor among the measures"]
    assert only.verdict == "reproduced" and only.n == 3 and "llc 0/3" in only.measured
    assert found["Log-prob emergence comes before accuracy acquisition"].measured.endswith("median accuracy there 0.01")


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
    assert found.n == 1 and found.verdict == "reproduced"  # the same curve: rho 1
    measured = run("large", size="s", parameters=1000, measure_names=["rankme", "llc"], **sized)
    assert by_claim(claims([small, measured]))["Small models' RankMe curves predict larger ones'"].verdict \
        == "not testable"  # a run with every measure enters only the comparison of measures
