"""The run session on its own, fed by a plain loop: rules that lack their inputs are left out with one message each
saying what to log or pass, alerts are announced once, forecasts are published, and the summary is written once
with what was added to the run info."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from capgeo_callbacks.detection import DetectionSettings
from capgeo_callbacks.publish.publisher import Publisher
from capgeo_callbacks.rules import LossOnsetRule, ThresholdForecaster, default_rules
from capgeo_callbacks.run.failures import WarnOnce
from capgeo_callbacks.run.session import Measurements, RunSession
from capgeo_callbacks.run.summary import SUMMARY_FILENAME, run_info_of
from tests.detection.conftest import PRECURSOR_ACC, PRECURSOR_RANKME, STEPS
from tests.rules.conftest import INFO, TOKEN_ACC


class Recorded(Publisher):
    shows_images = True  # type: ignore[assignment]  # a publisher whose images someone sees: figures are drawn

    def __init__(self) -> None:
        self.scalars_at: dict[int, dict[str, float]] = {}
        self.alerts: list[str] = []
        self.images: list[tuple[str, int]] = []
        self.texts: dict[str, str] = {}
        self.layouts: list[Mapping] = []

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        self.scalars_at.setdefault(step, {}).update(values)

    def alert(self, title: str, text: str, step: int) -> None:
        self.alerts.append(text)

    def image(self, tag: str, image: object, step: int) -> None:
        self.images.append((tag, step))

    def text(self, tag: str, text: str, step: int) -> None:
        self.texts[tag] = text

    def layout(self, layout: Mapping) -> None:
        self.layouts.append(layout)


def test_rules_without_their_inputs_say_once_what_to_log_and_stay_silent() -> None:
    said: list[str] = []
    rules = [*default_rules(DetectionSettings(smoothing=1)), ThresholdForecaster("token_acc", window=1.0),
             LossOnsetRule()]
    session = RunSession(rules, warn=WarnOnce("capgeo", said.append))
    for step, acc in zip(STEPS, PRECURSOR_ACC, strict=True):  # only the accuracy, no measure, no run facts
        session.evaluate(step, acc)
    assert session.tracker.left_out == {"rankme-recovery": ["rankme/*"], "probe-crossing": ["probe_acc/*"],
                                        "token_acc-threshold": ["val/token_acc", "chance"],
                                        "loss-onset": ["val/logprob|val/loss"]}
    assert len(said) == 4  # once each, at the first evaluation; the default forecaster needs the accuracy only
    study, probes, forecaster, loss = said
    assert "rule 'rankme-recovery' is left out of this run" in study and "RankMeMonitor" in study
    assert "'probe_acc/*'" in probes and "LinearProbeMonitor" in probes
    assert "'val/token_acc'" in forecaster and "token_acc_monitor=" in forecaster
    assert "run_info={'chance': " in forecaster
    assert "'val/logprob' or 'val/loss'" in loss
    assert session.alerts == [] and "acc-trend" not in session.tracker.left_out
    assert set(session.tracker.forecasts) <= {"acc-trend"}
    assert session.build_summary()["rules_left_out"]["token_acc-threshold"] == ["val/token_acc", "chance"]


def test_measures_left_out_are_noted_in_the_summary_and_are_not_run_info() -> None:
    session = RunSession(warn=WarnOnce("capgeo", [].append))
    for step, acc in zip(STEPS, PRECURSOR_ACC, strict=True):
        session.evaluate(step, acc)
    assert "measures_left_out" not in session.build_summary(Measurements())  # nothing left out: no key
    why = "ILDR needs the target of every row RankMe reads (no targets found); RankMe was measured without it"
    summary = session.build_summary(Measurements(left_out={"ildr": why}))
    assert summary["measures_left_out"] == {"ildr": why} and "measures_left_out" not in run_info_of(summary)


def test_the_user_s_names_are_recorded_and_read_under_capgeo_s() -> None:
    session = RunSession([LossOnsetRule()], logprob_key=None, loss_key="valid/nll")
    for step, acc in zip(STEPS, PRECURSOR_ACC, strict=True):
        session.evaluate(step, acc, {"valid/nll": 2.0 - acc})
    assert session.tracker.left_out == {} and "valid/nll" not in session.tracker.scalars
    assert [point[1] for point in session.tracker.scalars["val/loss"]] == [2.0 - acc for acc in PRECURSOR_ACC]


def test_alerts_once_forecasts_published_and_the_summary_written_once(tmp_path: Path) -> None:
    announced: list = []
    rules = [*default_rules(DetectionSettings(smoothing=1)), ThresholdForecaster("token_acc", window=1.0)]
    session = RunSession(rules, run_info=INFO, on_alert=announced.append)
    publisher = Recorded()
    measured: dict[str, list[list[float]]] = {"rankme/last": [], "probe_acc/last": []}
    for i, (step, acc) in enumerate(zip(STEPS, PRECURSOR_ACC, strict=True)):
        measured["rankme/last"].append([step, PRECURSOR_RANKME[i]])
        measured["probe_acc/last"].append([step, 0.1 if i < 6 else 0.7])
        session.evaluate(step, acc, {"val/token_acc": TOKEN_ACC[i]}, Measurements(measured), publisher)
    assert session.tracker.left_out == {}
    rules = [a.rule for a in session.alerts]
    assert rules == [a.rule for a in announced]
    assert {"probe-crossing", "rankme-recovery", "token_acc-threshold"} == set(rules)
    assert publisher.alerts == [a.message() for a in session.alerts]  # each announced once
    forecasts = [f for f in session.tracker.forecasts["token_acc-threshold"] if math.isfinite(f.predicted)]
    assert forecasts and all(publisher.scalars_at[f.step]["forecast/token_acc-threshold"] == f.predicted
                             for f in forecasts)  # "not within reach" is not a point to plot
    session.add_run_info({"cpu_seconds": 12.5})
    written = session.finish(Measurements(measured), steps=1900, directory=tmp_path)
    assert json.loads((tmp_path / SUMMARY_FILENAME).read_text())["cpu_seconds"] == 12.5 == written["cpu_seconds"]
    (tmp_path / SUMMARY_FILENAME).unlink()
    session.finish(Measurements(measured), steps=1900, directory=tmp_path)
    assert not (tmp_path / SUMMARY_FILENAME).exists()  # written once per run


def test_a_session_rebuilds_from_its_state() -> None:
    session = RunSession(default_rules(), DetectionSettings(min_drop=0.3), INFO, monitor="val/exact")
    for step, acc in zip(STEPS[:5], PRECURSOR_ACC[:5], strict=True):
        session.evaluate(step, acc)
    state = json.loads(json.dumps(session.state_dict()))  # what a checkpoint keeps, as plain data
    rebuilt = RunSession.from_state(state)
    assert [rule.settings() for rule in rebuilt.tracker.rules] == [rule.settings() for rule in session.tracker.rules]
    assert (rebuilt.settings, rebuilt.run_info, rebuilt.monitor) == (session.settings, INFO, "val/exact")
    assert rebuilt.acc == []  # configured as the run was, with an empty record
    rebuilt.load_state_dict(state)
    assert rebuilt.acc == session.acc and rebuilt.tracker.left_out == session.tracker.left_out


def test_the_story_card_is_drawn_where_the_story_changes_and_survives_a_resume() -> None:
    def feed(session: RunSession, publisher: Recorded, indices: range) -> None:
        for i in indices:
            measured["rankme/last"].append([STEPS[i], PRECURSOR_RANKME[i]])
            measured["probe_acc/last"].append([STEPS[i], 0.1 if i < 6 else 0.7])
            session.evaluate(STEPS[i], PRECURSOR_ACC[i], {"val/token_acc": TOKEN_ACC[i]}, Measurements(measured),
                             publisher)

    rules = default_rules(DetectionSettings(smoothing=1))
    measured: dict[str, list[list[float]]] = {"rankme/last": [], "probe_acc/last": []}
    session, publisher = RunSession(rules, run_info=INFO, live_figures=True), Recorded()
    feed(session, publisher, range(len(STEPS)))
    first_warnings = sorted({min(a.step for a in session.alerts if a.rule == rule and a.kind == "run")
                             for rule in {a.rule for a in session.alerts}})
    confirmed = STEPS[[s for s, _ in session.acc].index(session.acquired_step) + session.settings.patience - 1]
    assert [step for _, step in publisher.images] == sorted({*first_warnings, confirmed})
    assert len(publisher.images) < len(STEPS) // 2

    measured = {"rankme/last": [], "probe_acc/last": []}  # the same run, resumed after its last warning
    first = RunSession(rules, run_info=INFO, live_figures=True)
    feed(first, Recorded(), range(18))
    resumed, publisher = RunSession(rules, run_info=INFO, live_figures=True), Recorded()
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    feed(resumed, publisher, range(18, len(STEPS)))
    assert publisher.images == []  # acquisition (confirmed at step 1,700) was drawn before the resume
    assert RunSession(rules, run_info=INFO).live_figures is False  # the default of a bare session: the end only


def test_figures_are_drawn_only_for_a_publisher_that_shows_them_and_the_end_once() -> None:
    class Blind(Recorded):
        shows_images = False  # type: ignore[assignment]

    rules = default_rules(DetectionSettings(smoothing=1))
    for publisher, drawn in ((Blind(), False), (Recorded(), True)):
        session = RunSession(rules, run_info=INFO, live_figures=True)
        measured: dict[str, list[list[float]]] = {"rankme/last": [], "probe_acc/last": []}
        for i, step in enumerate(STEPS):
            measured["rankme/last"].append([step, PRECURSOR_RANKME[i]])
            measured["probe_acc/last"].append([step, 0.1 if i < 6 else 0.7])
            session.evaluate(step, PRECURSOR_ACC[i], {"val/token_acc": TOKEN_ACC[i]}, Measurements(measured),
                             publisher)
        live = len(publisher.images)
        session.finish(Measurements(measured), STEPS[-1], publisher)
        session.finish(Measurements(measured), STEPS[-1], publisher)  # a second end draws nothing again
        ends = [tag for tag, step in publisher.images[live:]]
        assert (live > 0, ends) == ((True, ["capgeo/story", "capgeo/rankme_heatmap"]) if drawn else (False, []))



def test_every_run_with_a_budget_says_what_capgeo_cost_it() -> None:
    """The dashboard charts the share the progress bar shows, at every evaluation, and the verdict says it; the
    summary's record gives the shares on both clocks; with the budget off, none of it."""
    for setting in ("measure", 0.03, None):
        session = RunSession(default_rules(), run_info=INFO, overhead_budget=setting, rules_chosen=False)
        publisher = Recorded()
        publisher.shows_images = False  # no figure to draw: the cost is said in text and scalars
        if session.budget is not None:
            session.budget.start()
        session.start(publisher, ["rankme/last"])
        for step, acc in zip(STEPS, PRECURSOR_ACC, strict=True):
            session.evaluate(step, acc, publisher=publisher)
        summary = session.finish(steps=STEPS[-1], publisher=publisher)
        (charts,) = publisher.layouts[0].values()
        shown = [step for step, values in publisher.scalars_at.items() if "capgeo/overhead_share" in values]
        if setting is None:
            assert "overhead" not in summary and not shown and "capgeo's share of the run's time" not in charts
            assert "capgeo's cost" not in publisher.texts["capgeo/verdict"]
            continue
        assert shown == STEPS  # at every evaluation
        assert charts["capgeo's share of the run's time"] == ["Multiline", ["capgeo/overhead_share"]]
        record = summary["overhead"]
        assert record["setting"] == setting and set(record["shares"]["whole_run"]) == {"cpu", "wall"}
        assert "capgeo's cost: CPU " in publisher.texts["capgeo/verdict"]
