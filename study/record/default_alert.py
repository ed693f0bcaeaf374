"""Whether a rule joins capgeo's default alert, decided by the registered runs (``python -m study.record.default_alert
readme``: the README's line on which alert to read first).

The rule, applied here to both registered tests (who will learn, grokking): a rule of the library joins
:func:`capgeo_callbacks.rules.default_rules` where, at one operating point chosen on each test's calibration runs alone
(the same point on both; docs/who-learns.md and docs/grokking.md, "Every rule's lead at a capped false-alarm rate"), it
warns earlier than every registered warning of each test on that test's held-out runs, at no more false alarms.
*Earlier*: at least as large a share of the runs that acquire warned before acquisition and at least as large a median
lead as a share of the time to acquisition (over the runs it warned; none warned: 0), one of the two larger. *No more
false alarms*: no larger share of the runs that never acquire alerting, and no larger share of the controls. Where no
rule does, the defaults are kept and the line says why, with the figures. The line is made from the same computation
as the pages' tables, and it fails where ``default_rules()`` and the decision disagree.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from capgeo_callbacks.keys import RANKME_RECOVERY
from capgeo_callbacks.rules import default_rules
from capgeo_callbacks.scoring.leads import MAX_FALSE_RATE, RuleLead
from capgeo_callbacks.scoring.scores import Rate
from study.record import registered as shared

KEPT = (RANKME_RECOVERY, "probe-crossing", "acc-trend")  # default_rules() as they stood before the record decided


@dataclass(frozen=True)
class Phase:
    """One registered test as the decision reads it: its name, its page and its leads table."""

    name: str
    page: str
    leads: Sequence[RuleLead]

    @property
    def registered(self) -> list[RuleLead]:
        return [lead for lead in self.leads if shared.is_registered(lead)]

    def chosen(self, rule: str) -> RuleLead | None:
        """``rule``'s row where calibration chose it an operating point within the cap and every held-out run could
        read it; else None."""
        found = next((lead for lead in self.leads if lead.rule == rule), None)
        return found if found is not None and found.chosen and not found.heldout.left_out else None


def share(lead: RuleLead) -> float:
    """The median lead as a share of the time to acquisition over the held-out runs it warned (none warned: 0)."""
    return lead.heldout.lead_share.value or 0.0


def rate(found: Rate) -> float:
    return found.value or 0.0


def earlier(lead: RuleLead, than: RuleLead) -> bool:
    """Whether ``lead`` warns earlier than ``than`` on the held-out runs (module docstring)."""
    warned, theirs = rate(lead.heldout.warned), rate(than.heldout.warned)
    return warned >= theirs and share(lead) >= share(than) and (warned > theirs or share(lead) > share(than))


def no_more_false_alarms(lead: RuleLead, than: RuleLead) -> bool:
    """Whether ``lead`` alerts on no larger share of the held-out runs that never acquire, nor of the controls."""
    return (rate(lead.heldout.false_alarms) <= rate(than.heldout.false_alarms)
            and rate(lead.heldout.controls) <= rate(than.heldout.controls))


def beaten_by(lead: RuleLead, test: Phase) -> list[RuleLead]:
    """The registered warnings of ``test`` that ``lead`` does not warn earlier than at no more false alarms."""
    return [other for other in test.registered if not (earlier(lead, other) and no_more_false_alarms(lead, other))]


@dataclass(frozen=True)
class Decision:
    """What the record says of the default alert.

    Attributes:
        tests: the registered tests, each with its leads.
        candidates: the rules of the library with one operating point chosen within the cap on every test's
            calibration runs, by name, with each test's row.
        joins: the first candidate that warns earlier than every registered warning of every test at no more false
            alarms (None: none does).
    """

    tests: Sequence[Phase]
    candidates: Mapping[str, Sequence[RuleLead]]
    joins: str | None


def decide(tests: Sequence[Phase]) -> Decision:
    """The rule that joins the defaults, if any (module docstring)."""
    names = [lead.rule for lead in tests[0].leads if not shared.is_registered(lead)]
    candidates = {}
    for name in names:
        rows = [test.chosen(name) for test in tests]
        if all(row is not None for row in rows) and all(row.settings == rows[0].settings for row in rows):
            candidates[name] = rows
    joins = next((name for name, rows in candidates.items()
                  if not any(beaten_by(row, test) for row, test in zip(rows, tests, strict=True))), None)
    return Decision(tests, candidates, joins)


def record_of(lead: RuleLead, short: bool = False) -> str:
    """A row's held-out figures in words (``short``: the counts alone, beside a full record of the same runs)."""
    held = lead.heldout
    if short:
        return (f"{held.warned.k} of {held.warned.n} ({share(lead):.2f}), {held.false_alarms.k} of "
                f"{held.false_alarms.n} and {held.controls.k} of {held.controls.n}")
    return (f"{held.warned.k} of {held.warned.n} runs that acquire before acquisition (median lead {share(lead):.2f} "
            f"of the time to it), with {held.false_alarms.k} of {held.false_alarms.n} runs that never acquire and "
            f"{held.controls.k} of {held.controls.n} controls alerting")


def registered_name(lead: RuleLead) -> str:
    return lead.rule.split(": ", 1)[1]


def why_kept(decision: Decision) -> str:
    """Why no rule joins: per candidate and test, the first registered warning it does not beat, with both records;
    the rules with a point within the cap on one test only."""
    parts = []
    for name, rows in decision.candidates.items():
        said = []
        for row, test in zip(rows, decision.tests, strict=True):
            beaten = beaten_by(row, test)
            if beaten:
                other = beaten[0]
                role = other.rule.split(": ", 1)[0]
                said.append(f"on {test.name} it warns {record_of(row, short=bool(said))}, against the {role} "
                            f"`{registered_name(other)}`'s {record_of(other, short=True)}")
        parts.append(f"`{name}` ({rows[0].setting}) has one on both: " + "; ".join(said))
    one = [(lead.rule, test.name) for test in decision.tests for lead in test.leads
           if not shared.is_registered(lead) and test.chosen(lead.rule) and lead.rule not in decision.candidates]
    if one:
        parts.append(shared.joined([f"`{rule}`" for rule, _ in one]) + " "
                     + ("has" if len(one) == 1 else "have") + " one on "
                     + shared.joined(sorted({name for _, name in one})) + " only")
    if not decision.candidates:
        parts.insert(0, "no rule has one operating point within the cap on the calibration runs of every test")
    return "; ".join(parts)


def sentence(decision: Decision) -> str:
    """The README's words on the default alert, from :func:`decide`."""
    links = " and ".join(f"[{test.name}]({test.page}#{shared.LEADS_ANCHOR})" for test in decision.tests)
    if decision.joins is not None:
        rows = decision.candidates[decision.joins]
        return (f"**The default alert follows the record:** `{decision.joins}` ({rows[0].setting}) joins "
                "the default rules: at an operating point chosen on calibration runs it warns earlier than every "
                "registered warning on the held-out runs of both registered tests, at no more false alarms ("
                + "; ".join(f"{test.name}: {record_of(row)}" for row, test in zip(rows, decision.tests, strict=True))
                + f"; every rule's lead: {links}).")
    return ("**The default alert is kept** (`" + "`, `".join(KEPT) + "`): no rule at an operating point chosen on "
            f"calibration runs (at most {MAX_FALSE_RATE:.0%} of the runs that never acquire and no control alerting) "
            "warns earlier "
            "than the registered warnings on the held-out runs of both registered tests at no more false alarms "
            f"(every rule's lead: {links}): {why_kept(decision)}.")


def check(decision: Decision, rules: Callable[[], Sequence[object]] = default_rules) -> None:
    """That ``default_rules()`` follows the decision: the chosen rule in it, and nothing but the kept defaults and it.

    Raises:
        RuntimeError: where they differ (the library's defaults are to change with the record).
    """
    names = [getattr(rule, "name", "") for rule in rules()]
    wanted = {*KEPT, *([decision.joins] if decision.joins else [])}
    if set(names) != wanted:
        raise RuntimeError(f"default_rules() holds {names}; the registered runs decide {sorted(wanted)} "
                           "(capgeo_callbacks/rules/__init__.py)")


def tests() -> list[Phase]:
    """Both registered tests, with their leads (computed once per process by each page's figures)."""
    from study.record import grokking_report, who_learns_report

    return [Phase("who will learn", "docs/who-learns.md", who_learns_report.figures().leads),
            Phase("grokking", "docs/grokking.md", grokking_report.figures().leads)]


WHICH_FIRST = ("**Which alert to read first:** `probe-crossing`, a linear probe reading your targets halfway from "
               "chance (the warning chosen on some seeds, then registered and tested on seeds it was not chosen on). "
               f"The `precursor alert` (`{RANKME_RECOVERY}`) says RankMe dipped and recovered, as it does early in "
               "nearly every run; the forecast (`acc-trend`) gives a step once the accuracy rises above chance.")


def readme() -> str:
    """The README's paragraph: which alert to read first, and whether the record changed the defaults."""
    decision = decide(tests())
    check(decision)
    return f"{WHICH_FIRST} {sentence(decision)}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m study.record.default_alert", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("readme",), help="the README's paragraph on the default alert")
    parser.parse_args(argv)
    print(readme())


if __name__ == "__main__":
    main()
