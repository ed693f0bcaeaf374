"""A renamed rule (``study`` -> ``rankme-recovery``, ``StudyRule`` -> ``RankMeRecoveryRule``): committed summaries that
recorded the former name replay and score as they recorded, read silently; code that passes a former name gets the
rule with one ``DeprecationWarning``."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import capgeo_callbacks.rules.base as base
from capgeo_callbacks.detection.alerts import alert_from_record
from capgeo_callbacks.keys import RANKME_RECOVERY, RENAMED_RULES, rule_name
from capgeo_callbacks.publish.text import first_warnings, rules_table
from capgeo_callbacks.rules import RankMeRecoveryRule, make_rule, replay, rule_from_record
from capgeo_callbacks.run.failures import WarnOnce, warn_at_caller
from capgeo_callbacks.run.summary import read_summary
from capgeo_callbacks.scoring.leads import grid_of
from capgeo_callbacks.scoring.scores import scored_run, warning_scores

CORPUS = Path(__file__).resolve().parents[2] / "study" / "corpus"
# committed summaries that recorded the rule live as "study": runs that acquire, one that never does, a control
COMMITTED = ["who-learns/heldout/reverse-full-s208.json.gz", "who-learns/heldout/mul-full-s208.json.gz",
             "who-learns/heldout/mul-control-s200.json.gz", "heldout/add-hard-xs-s100.json.gz",
             "newtasks/sum3-s100.json.gz"]


def recorded_rule(summary: dict) -> RankMeRecoveryRule:
    """The rule a summary recorded under its former name, rebuilt from the settings it recorded."""
    [(name, settings)] = [(name, settings) for name, settings in summary["rules"].items() if name in RENAMED_RULES]
    rule = type(make_rule(rule_name(name))).from_settings(settings)
    assert isinstance(rule, RankMeRecoveryRule) and rule.name == RANKME_RECOVERY
    return rule  # type: ignore[return-value]


def test_committed_summaries_replay_and_score_as_they_recorded() -> None:
    runs, recorded_first = [], {}
    for path in COMMITTED:
        summary = read_summary(CORPUS / path)
        run = scored_run(summary, path)
        assert run is not None
        rule = recorded_rule(summary)
        alerts, _ = replay(rule, run.view)
        recorded = [alert for alert in summary["alerts"] if alert["rule"] == "study"]
        assert [(a.kind, a.layer, a.step) for a in alerts] == [(a["kind"], a["layer"], a["step"]) for a in recorded]
        assert {a.rule for a in alerts} <= {RANKME_RECOVERY}
        # the summary's alerts, read back (a resumed run's), by the rule's name now
        assert [alert_from_record(a).rule for a in recorded] == [RANKME_RECOVERY] * len(recorded)
        recorded_first[run.name] = next((a["step"] for a in recorded if a["kind"] == "run"), None)
        runs.append(run)
    assert any(recorded_first.values()) and any(step is None for step in recorded_first.values())
    # scored from what the runs recorded live and from the renamed rule's replay: the same figures
    live = warning_scores("study", runs, fired=recorded_first)
    again = warning_scores(make_rule(RANKME_RECOVERY), runs)
    assert {key: value for key, value in live.items() if key != "rule"} == \
        {key: value for key, value in again.items() if key != "rule"}
    assert again["recall"].n and again["false_alarms_controls"].n


def test_a_summary_that_recorded_the_former_name_reads_as_the_rule_now() -> None:
    summary = read_summary(CORPUS / COMMITTED[0])
    assert "study" in summary["rules"] and RANKME_RECOVERY in first_warnings(summary)
    assert rules_table(summary).splitlines()[2].split()[0] == RANKME_RECOVERY
    older = read_summary(CORPUS / "hard" / "add-hard-xs-s0.json.gz")  # alerts recorded with no rule at all
    assert first_warnings(older) == {RANKME_RECOVERY: 108}


def test_a_registration_entry_of_the_former_class_loads_silently() -> None:
    entry = {"name": "study", "class": "capgeo_callbacks.rules.geometry.StudyRule", "settings": {}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rule = rule_from_record(entry)
    assert isinstance(rule, RankMeRecoveryRule) and rule.name == RANKME_RECOVERY


def test_code_that_passes_a_former_name_is_warned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "_DEPRECATED", WarnOnce(emit=lambda text: warn_at_caller(text, DeprecationWarning)))
    with pytest.warns(DeprecationWarning, match="'study' is a former name of 'rankme-recovery'"):
        rule = make_rule("study")
    assert isinstance(rule, RankMeRecoveryRule) and rule.name == RANKME_RECOVERY
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_rule("study")  # once
        assert grid_of("study").name == RANKME_RECOVERY
    with pytest.warns(DeprecationWarning, match="'StudyRule' is a former name of 'RankMeRecoveryRule'"):
        from capgeo_callbacks.rules import StudyRule
    assert StudyRule is RankMeRecoveryRule
    with pytest.raises(AttributeError, match="NoSuchRule"):
        getattr(base, "NoSuchRule")  # noqa: B009 - an unknown name stays an error
