"""The rules a registration file freezes (``study/registration.json``) load by their class paths and settings,
and the library's recommended rules are the registered warning and forecaster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from capgeo_callbacks.keys import rule_name
from capgeo_callbacks.rules import default_rules, rule_from_record, rule_record
from capgeo_callbacks.rules.base import RENAMED_CLASSES

REGISTRATION = Path(__file__).resolve().parents[2] / "study" / "registration.json"


def entries(node: Any) -> list[dict[str, Any]]:
    """Every entry of the registration that names a rule class, with its name filled in from its key."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, dict) and "class" in value:
                found.append({"name": value.get("name", key), **value})
            else:
                found += entries(value)
    return found


def test_every_registered_class_path_loads_with_its_settings() -> None:
    registered = entries(json.loads(REGISTRATION.read_text()))
    assert len(registered) >= 10  # the warning, the forecaster and the rules they were compared with
    for entry in registered:
        rule = rule_from_record(entry)
        assert rule.name == rule_name(entry["name"])  # a former name ("study") read as the rule's name now
        settings = rule.settings()
        # nothing lost; the ridge's fit options (penalty, fractions), constructor settings since, at their defaults
        assert {key: settings[key] for key in entry["settings"]} == entry["settings"], entry["name"]
        assert set(settings) - set(entry["settings"]) <= {"penalty", "fractions"}
        record = rule_record(rule)
        assert (record["name"], record["class"]) == (rule_name(entry["name"]),
                                                     RENAMED_CLASSES.get(entry["class"], entry["class"]))
        assert rule_from_record(record).settings() == settings


def test_default_rules_hold_the_registered_warning_and_a_forecaster_without_calibration() -> None:
    """The library's recommended rules: rankme-recovery, the warning frozen in the registration, and the
    forecaster that needs the monitored accuracy alone (the registered one needs a chance table, which only capgeo's
    own runs record; train.py runs it beside them)."""
    registration = json.loads(REGISTRATION.read_text())
    rules = {rule.name: rule for rule in default_rules()}
    entry = registration["warning"]
    assert entry["name"] in rules and rules[entry["name"]].settings() == entry["settings"]
    assert "rankme-recovery" in rules and "acc-trend" in rules
    assert rules["acc-trend"].needs.series == ("acc",) and rules["acc-trend"].needs.facts == ()
