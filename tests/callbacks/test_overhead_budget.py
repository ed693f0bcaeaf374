"""The overhead budget on a real Trainer: off, the series are those of a run without it; "measure", the same series and
the same final weights, with capgeo's share recorded; tiny, the protected start is whole, the optional work is left
out after it, and the rules' inputs are thinned to an even cadence, never dropped, with the start's cost said once."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import Callback

from capgeo_callbacks import LinearProbeMonitor, PrecursorDetector, RankMeMonitor
from capgeo_callbacks.rules import ILDRRiseRule, RankMeRecoveryRule
from capgeo_callbacks.run.budget import DEFAULT_OVERHEAD_BUDGET, MAX_STRIDE, MEASURE, OPTIONAL, RULE_INPUT
from tests.callbacks.helpers import TinyAnswerLM, answer_loaders

STEPS, EVERY = 40, 2  # 20 evaluations; the first tenth of the steps (to step 4) is the protected start


def run(path: Path, detector: bool, budget: float | str | None = None
        ) -> tuple[dict[str, list[list[float]]], PrecursorDetector | None, dict[str, torch.Tensor]]:
    seed_everything(0, verbose=False)
    rankme = RankMeMonitor(layers=["blocks.*", "norm_f"], num_rows=64)
    probes = LinearProbeMonitor(layers=["blocks.*", "norm_f"], num_rows=64, selector="answer")
    callbacks: list[Callback] = [rankme, probes]
    found = None
    if detector:
        # the study's rule alone, which reads RankMe: the probes are optional work (probe-crossing, a default
        # rule, would read them)
        found = PrecursorDetector(monitor="val_acc", logprob_monitor=None, token_acc_monitor=None,
                                  loss_monitor=None, overhead_budget=budget, rules=[RankMeRecoveryRule()])
        callbacks.append(found)
    trainer = Trainer(max_steps=STEPS, val_check_interval=EVERY, logger=False, callbacks=callbacks,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                      num_sanity_val_steps=0, accelerator="cpu", deterministic=True, default_root_dir=path)
    module = TinyAnswerLM()
    trainer.fit(module, *answer_loaders())
    return {**rankme.series, **probes.series}, found, {k: v.clone() for k, v in module.state_dict().items()}


def test_the_default_is_on_measure_only_times_and_off_means_no_budget() -> None:
    assert PrecursorDetector().session.budget.share == DEFAULT_OVERHEAD_BUDGET
    measure = PrecursorDetector(overhead_budget="measure").session.budget
    assert measure.share is None and not measure.thins
    for off in (None, 0, "off"):
        assert PrecursorDetector(overhead_budget=off).session.budget is None
    for bad in (1.5, "fast"):
        with pytest.raises(ValueError, match="overhead_budget must be .*'measure'"):
            PrecursorDetector(overhead_budget=bad)


def test_measure_or_off_the_series_and_the_weights_are_those_of_a_run_without_capgeo_s_budget(tmp_path: Path) -> None:
    plain, _, plain_weights = run(tmp_path / "plain", detector=False)
    off, detector, off_weights = run(tmp_path / "off", detector=True, budget=None)
    timed, timer, timed_weights = run(tmp_path / "measure", detector=True, budget="measure")
    assert plain and off == plain and timed == plain  # bit-identical: compared with ==
    for weights in (off_weights, timed_weights):
        assert weights.keys() == plain_weights.keys()
        assert all(torch.equal(weights[k], plain_weights[k]) for k in plain_weights)
    assert "overhead" not in detector.summary
    record: dict[str, Any] = timer.summary["overhead"]
    assert (record["setting"], record["budget"], record["kept"], record["thinned"]) == (MEASURE, None, None, 0)
    assert record["capgeo_seconds"] > 0 and record["share"] > 0
    for part in ("whole_run", "after_start"):
        assert all(record["shares"][part][clock] > 0 for clock in ("cpu", "wall"))
    assert set(record["work"]) == {"rankme", "probe_acc", "detector", "figures"}


def test_a_tiny_budget_thins_optional_work_first_and_the_rules_inputs_evenly_and_says_so(tmp_path: Path) -> None:
    plain, _, _ = run(tmp_path / "plain", detector=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        thinned, detector, _ = run(tmp_path / "tiny", detector=True, budget=1e-6)
    said = [str(w.message) for w in caught if "protected start" in str(w.message)]
    assert len(said) == 1 and "to step 4" in said[0] and "more than its whole overhead budget" in said[0]
    steps = [point[0] for point in plain["rankme/norm_f"]]
    assert steps == list(range(EVERY, STEPS + 1, EVERY))
    protected_until = STEPS // 10
    start = [s for s in steps if s <= protected_until]
    rankme = [tag for tag in plain if tag.startswith("rankme/")]
    probes = [tag for tag in plain if tag.startswith("probe_acc/")]
    assert rankme and probes
    for tag in rankme:  # the study's rule reads RankMe: the start whole, then one in MAX_STRIDE, never dropped
        kept = [point[0] for point in thinned[tag]]
        after = [s for s in kept if s > protected_until]
        assert kept[: len(start)] == start and after == steps[len(start) - 1 + MAX_STRIDE::MAX_STRIDE]
        assert [p for p in plain[tag] if p[0] in kept] == thinned[tag]  # what was measured is the same value
    for tag in probes:  # optional: whole in the start, left out after it
        assert [point[0] for point in thinned[tag]] == start
        assert [p for p in plain[tag] if p[0] in start] == thinned[tag]
    record = detector.summary["overhead"]
    assert record["budget"] == 1e-6 and record["kept"] is False and record["said"] == [said[0].split(": ", 1)[1]]
    assert record["protected_until_step"] == protected_until and record["rule_input_stride"] == MAX_STRIDE
    work = record["work"]
    assert work["rankme"]["kind"] == RULE_INPUT and work["rankme"]["runs"] == len(thinned["rankme/norm_f"])
    assert work["probe_acc"]["kind"] == OPTIONAL and work["probe_acc"]["thinned"] == len(steps) - len(start)
    assert work["detector"]["kind"] == "fixed" and work["detector"]["seconds"] > 0


def test_ildr_is_a_rule_input_with_rankme_and_thinned_with_it(tmp_path: Path) -> None:
    """The ildr-rise rule alone reads ILDR, which RankMe's monitor measures on its rows: the monitor is a rule input
    (thinned last, evenly, never dropped), ILDR's points are RankMe's, and its time is in RankMe's work."""
    seed_everything(0, verbose=False)
    rankme = RankMeMonitor(layers=["blocks.*", "norm_f"], num_rows=64)
    detector = PrecursorDetector(monitor="val_acc", logprob_monitor=None, token_acc_monitor=None, loss_monitor=None,
                                 overhead_budget=1e-6, rules=[ILDRRiseRule()])
    trainer = Trainer(max_steps=STEPS, val_check_interval=EVERY, logger=False, callbacks=[rankme, detector],
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                      num_sanity_val_steps=0, accelerator="cpu", default_root_dir=tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(TinyAnswerLM(), *answer_loaders())
    record = detector.summary["overhead"]
    assert record["work"]["rankme"]["kind"] == RULE_INPUT and record["rule_input_stride"] == MAX_STRIDE
    steps = list(range(EVERY, STEPS + 1, EVERY))
    start = [s for s in steps if s <= STEPS // 10]
    for layer in ("blocks.0", "norm_f"):
        kept = [point[0] for point in rankme.series[f"rankme/{layer}"]]
        assert kept == start + steps[len(start) - 1 + MAX_STRIDE::MAX_STRIDE]
        assert [point[0] for point in rankme.series[f"ildr/{layer}"]] == kept
    runs = record["work"]["rankme"]["runs"]
    [said] = [str(w.message) for w in caught if "protected start" in str(w.message)]
    assert f"rankme {len(start)} of {len(start)} so far, about {runs} of {len(steps)} over the run" in said
