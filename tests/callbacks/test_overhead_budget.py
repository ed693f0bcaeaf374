"""The overhead budget on a real Trainer: off, the series are those of a run without it; on but thinning nothing,
the same again; tiny, the optional work is thinned while what the rules read and the protected start are whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import Callback

from capgeo_callbacks import LinearProbeMonitor, PrecursorDetector, RankMeMonitor
from capgeo_callbacks.rules import StudyRule
from capgeo_callbacks.run.budget import DEFAULT_OVERHEAD_BUDGET
from tests.callbacks.helpers import TinyAnswerLM, answer_loaders

STEPS, EVERY = 40, 2  # 20 evaluations; the first tenth of the steps (to step 4) is the protected start


def run(path: Path, detector: bool, budget: float | None = None, protect_all: bool = False
        ) -> tuple[dict[str, list[list[float]]], PrecursorDetector | None]:
    seed_everything(0, verbose=False)
    rankme = RankMeMonitor(layers=["blocks.*", "norm_f"], num_rows=64)
    probes = LinearProbeMonitor(layers=["blocks.*", "norm_f"], num_rows=64, selector="answer")
    callbacks: list[Callback] = [rankme, probes]
    found = None
    if detector:
        # the study's rule alone, which reads RankMe: the probes are optional work (probe-crossing, a default
        # rule, would read them)
        found = PrecursorDetector(monitor="val_acc", logprob_monitor=None, token_acc_monitor=None,
                                  loss_monitor=None, overhead_budget=budget, rules=[StudyRule()])
        if protect_all and found.session.budget is not None:
            found.session.budget.protected_share = 1.0  # every evaluation protected: timed, nothing thinned
        callbacks.append(found)
    trainer = Trainer(max_steps=STEPS, val_check_interval=EVERY, logger=False, callbacks=callbacks,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                      num_sanity_val_steps=0, accelerator="cpu", deterministic=True, default_root_dir=path)
    trainer.fit(TinyAnswerLM(), *answer_loaders())
    return {**rankme.series, **probes.series}, found


def test_the_default_is_on_and_off_means_no_budget() -> None:
    assert PrecursorDetector().session.budget.share == DEFAULT_OVERHEAD_BUDGET
    assert PrecursorDetector(overhead_budget=None).session.budget is None
    assert PrecursorDetector(overhead_budget=0).session.budget is None
    with pytest.raises(ValueError, match="overhead_budget must be"):
        PrecursorDetector(overhead_budget=1.5)


def test_off_or_thinning_nothing_the_series_are_those_of_a_run_without_a_budget(tmp_path: Path) -> None:
    plain, _ = run(tmp_path / "plain", detector=False)
    off, detector = run(tmp_path / "off", detector=True, budget=None)
    timed, timer = run(tmp_path / "timed", detector=True, budget=0.01, protect_all=True)
    assert plain and off == plain and timed == plain  # bit-identical: compared with ==
    assert "overhead" not in detector.summary
    record: dict[str, Any] = timer.summary["overhead"]
    assert record["thinned"] == 0 and record["capgeo_seconds"] > 0 and record["share"] > 0
    assert set(record["work"]) == {"rankme", "probe_acc", "detector", "figures"}


def test_a_tiny_budget_thins_optional_work_and_keeps_what_the_rules_read_and_the_protected_start(
        tmp_path: Path) -> None:
    plain, _ = run(tmp_path / "plain", detector=False)
    thinned, detector = run(tmp_path / "tiny", detector=True, budget=1e-6)
    steps = [point[0] for point in plain["rankme/norm_f"]]
    assert steps == list(range(EVERY, STEPS + 1, EVERY))
    rankme = [tag for tag in plain if tag.startswith("rankme/")]
    probes = [tag for tag in plain if tag.startswith("probe_acc/")]
    assert rankme and probes
    for tag in rankme:  # the study's rule reads RankMe: every evaluation, the same values
        assert thinned[tag] == plain[tag]
    protected_until = STEPS // 10
    for tag in probes:
        kept = {point[0] for point in thinned[tag]}
        assert {s for s in steps if s <= protected_until} <= kept  # the protected start is whole
        assert len(kept) < len(steps)  # thinned after it
        assert [p for p in plain[tag] if p[0] in kept] == thinned[tag]  # what was measured is the same value
    record = detector.summary["overhead"]
    assert record["budget"] == 1e-6 and record["kept"] is False  # a budget the rules' inputs alone exceed, said
    assert record["protected_until_step"] == protected_until
    work = record["work"]
    assert work["rankme"] == {**work["rankme"], "protected": True, "thinned": 0, "runs": len(steps)}
    assert work["probe_acc"]["protected"] is False
    assert work["probe_acc"]["thinned"] == len(steps) - len(thinned[probes[0]]) > 0
    assert work["detector"]["protected"] is True and work["detector"]["seconds"] > 0
