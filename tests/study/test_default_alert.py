"""The default alert follows the record (study.record.default_alert), on leads whose answer is known: a rule joins
only where, at one operating point chosen on each test's calibration runs, it warns earlier than every registered
warning of both tests at no more false alarms; and the library's defaults must agree with the decision."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from capgeo_callbacks.rules import default_rules, make_rule
from capgeo_callbacks.scoring.leads import Alerting, RuleLead
from capgeo_callbacks.scoring.scores import Rate
from study.record import default_alert
from study.record.default_alert import KEPT, Phase, check, decide, sentence

ACQUIRERS = [f"a{k}" for k in range(4)]


def lead(rule: str, warned: Mapping[str, float], false_alarms: int, chosen: bool = True,
         settings: Mapping[str, float] | None = None, controls: int = 0) -> RuleLead:
    """A row whose held-out record is known: ``warned`` maps the acquirers it warned to their lead share (of 4
    acquirers, 5 runs that never acquire, 2 controls)."""
    held = Alerting(Rate(len(warned), len(ACQUIRERS)), Rate(false_alarms, 5), Rate(controls, 2), {},
                    {name: 100 for name in warned}, {name: warned.get(name, 0.0) for name in ACQUIRERS})
    return RuleLead(rule, False, dict(settings or {"fall": 0.3}), chosen, 4, held, held)


REGISTERED = lead("registered: probe-crossing", {"a0": 0.5, "a1": 0.5, "a2": 0.5, "a3": 0.5}, 3)
EARLIER = lead("val-loss-fall", {"a0": 0.6, "a1": 0.6, "a2": 0.6, "a3": 0.6}, 1)
FEWER = lead("acc-onset", {"a0": 0.9, "a1": 0.9}, 0)  # earlier where it warns, but warns half as many


def test_a_rule_earlier_than_every_registered_warning_on_both_tests_at_no_more_false_alarms_joins() -> None:
    tests = [Phase("one", "docs/one.md", [REGISTERED, FEWER, EARLIER]),
             Phase("two", "docs/two.md", [REGISTERED, EARLIER])]
    decision = decide(tests)
    assert list(decision.candidates) == ["val-loss-fall"] and decision.joins == "val-loss-fall"
    assert "joins the default rules" in sentence(decision) and "4 of 4 runs that acquire" in sentence(decision)
    with pytest.raises(RuntimeError, match="val-loss-fall"):
        check(decision)  # the library's defaults must follow the record
    check(decision, lambda: [*default_rules(), make_rule("val-loss-fall")])


@pytest.mark.parametrize(("second", "why"), [
    (lead("val-loss-fall", {"a0": 0.6, "a1": 0.6, "a2": 0.6, "a3": 0.6}, 4), "more false alarms on the second test"),
    (lead("val-loss-fall", {"a0": 0.6, "a1": 0.6, "a2": 0.6, "a3": 0.6}, 1, controls=1), "a control alerts"),
    (lead("val-loss-fall", {"a0": 0.4, "a1": 0.4, "a2": 0.4, "a3": 0.4}, 1), "a shorter lead"),
    (lead("val-loss-fall", {"a0": 0.6, "a1": 0.6, "a2": 0.6, "a3": 0.6}, 1, chosen=False), "no point within the cap"),
    (lead("val-loss-fall", {"a0": 0.6, "a1": 0.6, "a2": 0.6, "a3": 0.6}, 1, settings={"fall": 0.5}), "another point"),
])
def test_no_rule_joins_where_one_test_says_otherwise_and_the_defaults_are_kept(second: RuleLead, why: str) -> None:
    tests = [Phase("one", "docs/one.md", [REGISTERED, FEWER, EARLIER]),
             Phase("two", "docs/two.md", [REGISTERED, second])]
    decision = decide(tests)
    assert decision.joins is None, why
    said = sentence(decision)
    assert said.startswith("**The default alert is kept**") and "docs/two.md#" in said
    check(decision)  # default_rules() are the kept defaults
    assert [rule.name for rule in default_rules()] == list(KEPT)


def test_the_reason_names_the_rule_and_the_registered_warning_it_does_not_beat() -> None:
    tests = [Phase("one", "docs/one.md", [REGISTERED, FEWER]), Phase("two", "docs/two.md", [REGISTERED, FEWER])]
    said = default_alert.why_kept(decide(tests))
    assert said.startswith("`acc-onset` (fall=0.3) has one on both: on one it warns 2 of 4 runs that acquire before "
                           "acquisition (median lead 0.90")
    assert "against the registered `probe-crossing`'s 4 of 4 (0.50), 3 of 5 and 0 of 2; on two it warns 2 of 4 " \
        "(0.90), 0 of 5 and 0 of 2, against" in said
