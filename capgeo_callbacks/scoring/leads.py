r"""Every rule's lead at a capped false-alarm rate, its settings chosen on calibration runs
=======================================================================================

    capgeo score RUNS --calibration CALIBRATION [--leads RULE ...] [--max-false-rate 0.2] [--max-control-rate 0]

How early a rule warns and how often it rings on runs that never learn are set by its settings: a validation-loss
rule that fires at a 5% fall warns of nearly everything, at 30% only late. So each rule comes with a small named grid
of its settings (:class:`RuleGrid`, :data:`GRIDS`), and one point of the grid, its **operating point**, is chosen on
calibration runs only (:func:`choose`): the point that warns the most calibration runs that acquire, before they
acquire, while at most ``max_false_rate`` of the calibration runs that never acquire and at most
``max_control_rate`` of the calibration controls alert at all (defaults: 20% and none). Ties: the fewer false alarms,
then the earlier warning (the larger median lead as a share of the time to acquisition), then the grid's order. A
point must warn at least one acquirer; where none does within the cap, the row says so and shows the rule at its
default settings (what a user who never chose gets).

On the other runs, at that point (:func:`rule_leads`, :func:`leads_table`): the acquirers warned before acquisition
(k of n), the median lead in steps and as a share of the time to acquisition over the warned acquirers, each with a
percentile bootstrap 95% interval; the false-alarm rate realised on runs that never acquire (an alert at any step),
and the controls that alert; n beside each. Every point is the library's own rule
(:mod:`capgeo_callbacks.rules`) replayed evaluation by evaluation through
:func:`~capgeo_callbacks.rules.rule_output`, as it runs live. A run that lacks what a rule reads
(:class:`~capgeo_callbacks.rules.Needs`: ILDR on a run that never measured it) is left out of that rule's counts,
as it is left out live.

Runs are anything with a ``name``, a ``view`` (:class:`~capgeo_callbacks.rules.RunView`), an ``acquisition`` step
(None: never within the run) and ``control`` (:class:`LabelledRun`; a :class:`~capgeo_callbacks.scoring.ScoredRun`
is one).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from capgeo_callbacks.keys import RANKME_RECOVERY, rule_name
from capgeo_callbacks.publish.text import markdown_row
from capgeo_callbacks.rules import RULES, Rule, RunView, make_rule
from capgeo_callbacks.scoring.scores import Rate, bootstrap_median, first_alert

__all__ = ["GRIDS", "MAX_CONTROL_RATE", "MAX_FALSE_RATE", "Alerting", "LabelledRun", "Median", "RuleGrid",
           "RuleLead", "alerting", "choose", "grid_of", "leads_table", "rule_leads"]

MAX_FALSE_RATE = 0.2  # at most this share of the calibration runs that never acquire may alert
MAX_CONTROL_RATE = 0.0  # ... and this share of the calibration controls: none


class LabelledRun(Protocol):
    """A finished run as the leads see it: its series and whether (and when) it acquired."""

    @property
    def name(self) -> str: ...
    @property
    def view(self) -> RunView: ...
    @property
    def acquisition(self) -> int | None: ...
    @property
    def control(self) -> bool: ...


@dataclass(frozen=True)
class RuleGrid:
    """A registered rule and a small grid of its settings, from which calibration runs choose one.

    Args:
        name: the rule's name in :data:`~capgeo_callbacks.rules.RULES`; its factory makes each point
            (``RULES[name](**point)``) and its default settings are the factory's.
        grid: each setting's values, in order; the points are their product (none: the rule as registered).
        geometric: whether the rule reads a geometric series (RankMe, a probe, ILDR, the commutator defect).
        factory: another factory than ``RULES[name]`` (a rule not registered, a registered warning's settings).
    """

    name: str
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    geometric: bool = False
    factory: Callable[..., Rule] | None = None

    def make(self, settings: Mapping[str, Any]) -> Rule:
        return (self.factory or RULES[self.name])(**settings)

    def points(self) -> list[dict[str, Any]]:
        """Every setting of the grid, in order: the product of its values (no grid: one point, ``{}``)."""
        return [dict(zip(self.grid, values, strict=True)) for values in itertools.product(*self.grid.values())]

    @property
    def default(self) -> dict[str, Any]:
        """The factory's own values of the grid's settings."""
        made = self.make({}).settings()
        return {key: made[key] for key in self.grid if key in made}

    @classmethod
    def fixed(cls, rule: Rule, geometric: bool = False, name: str | None = None) -> RuleGrid:
        """A rule as it is, one point (a registered warning, with its registered settings), named ``name`` (default
        the rule's own: name it apart where its grid is compared too)."""
        return cls(name or rule.name, {}, geometric, lambda: rule)


def describe(settings: Mapping[str, Any]) -> str:
    """A point of a grid in words: ``fall=0.1, held=3`` (``its one setting`` for a rule with no grid)."""
    return ", ".join(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
                     for key, value in settings.items()) or "its one setting"


# The registered rules' grids, each from sensitive to conservative settings so that a cap can be met (a registered
# rule not named here runs at its default alone).
GRIDS: dict[str, RuleGrid] = {grid.name: grid for grid in (
    RuleGrid(RANKME_RECOVERY, geometric=True),
    RuleGrid("probe-crossing", {"share": (0.1, 0.2, 0.3, 0.5, 0.7, 0.9)}, geometric=True),
    RuleGrid("rankme-fall", {"fall": (0.05, 0.1, 0.2, 0.3, 0.5, 0.7), "held": (1, 3),
                             "ignore_steps": (0, 50, 100, 200)}, geometric=True),
    RuleGrid("ildr-rise", {"multiple": (1.5, 2.0, 2.5, 3.0, 5.0, 10.0)}, geometric=True),
    RuleGrid("commutator-rise", {"multiple": (1.5, 2.0, 3.0, 5.0)}, geometric=True),
    RuleGrid("val-loss-fall", {"fall": (0.05, 0.1, 0.2, 0.3, 0.5, 0.7), "held": (1, 2, 3, 5)}),
    RuleGrid("acc-onset", {"units": (2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 40.0)}),
    RuleGrid("loss-onset"),
)}


def grid_of(name: str) -> RuleGrid:
    """The grid of the registered rule ``name`` (:data:`GRIDS`; else the rule alone, at its default)."""
    make_rule(name)  # an unknown name: a clear error listing the known ones (a former name: a DeprecationWarning)
    name = rule_name(name)
    return GRIDS.get(name, RuleGrid(name))


# ------------------------------------------------------------------------------------------- counts


@dataclass(frozen=True)
class Median:
    """The median of ``n`` values with its percentile bootstrap 95% interval (None: no values)."""

    n: int
    value: float | None = None
    low: float | None = None
    high: float | None = None

    @classmethod
    def of(cls, values: Sequence[float]) -> Median:
        if not values:
            return cls(0)
        low, high = bootstrap_median(values)  # type: ignore[misc]
        return cls(len(values), float(statistics.median(values)), low, high)

    def text(self, digits: int = 0) -> str:
        if self.value is None:
            return "- (n=0)"
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}] (n={self.n})"


@dataclass(frozen=True)
class Alerting:
    """What one rule's alerts did on a set of runs.

    Attributes:
        warned: the acquirers (non-control runs that acquire) alerted before acquisition, of the acquirers.
        false_alarms: the non-control runs that never acquire alerted at any step, of those runs.
        controls: the controls alerted at any step, of the controls.
        fired: each run's first alert step (None: none).
        leads: each warned acquirer's lead, acquisition minus alert step.
        shares: each acquirer's lead as a share of its time to acquisition, 0 where it was not warned before.
        left_out: runs that lack what the rule reads, counted nowhere.
    """

    warned: Rate
    false_alarms: Rate
    controls: Rate
    fired: Mapping[str, int | None]
    leads: Mapping[str, int]
    shares: Mapping[str, float]
    left_out: int = 0

    @cached_property
    def lead_steps(self) -> Median:
        """The median lead in steps over the warned acquirers, with its interval."""
        return Median.of([float(lead) for lead in self.leads.values()])

    @cached_property
    def lead_share(self) -> Median:
        """The median lead as a share of the time to acquisition over the warned acquirers, with its interval."""
        return Median.of([self.shares[name] for name in self.leads])


def alerting(runs: Sequence[LabelledRun], fired: Mapping[str, int | None], left_out: int = 0) -> Alerting:
    """The counts and leads of alerts at ``fired`` (each run's first alert step, None: none) on ``runs``."""
    acquirers = [run for run in runs if not run.control and run.acquisition is not None]
    never = [run for run in runs if not run.control and run.acquisition is None]
    controls = [run for run in runs if run.control]
    leads, shares = {}, {}
    for run in acquirers:
        step, acquired = fired.get(run.name), int(run.acquisition)  # type: ignore[arg-type]
        warned = step is not None and step < acquired
        if warned:
            leads[run.name] = acquired - step  # type: ignore[operator]
        shares[run.name] = (acquired - step) / acquired if warned and acquired > 0 else 0.0  # type: ignore[operator]
    return Alerting(Rate(len(leads), len(acquirers)),
                    Rate(sum(fired.get(run.name) is not None for run in never), len(never)),
                    Rate(sum(fired.get(run.name) is not None for run in controls), len(controls)),
                    {run.name: fired.get(run.name) for run in runs}, leads, shares, left_out)


def within_cap(found: Alerting, max_false_rate: float = MAX_FALSE_RATE,
               max_control_rate: float = MAX_CONTROL_RATE) -> bool:
    """Whether ``found`` warns an acquirer while its false alarms and alerted controls stay within their caps."""
    return (found.warned.k > 0 and found.false_alarms.k <= max_false_rate * found.false_alarms.n + 1e-9
            and found.controls.k <= max_control_rate * found.controls.n + 1e-9)


def choose(candidates: Sequence[Alerting], max_false_rate: float = MAX_FALSE_RATE,
           max_control_rate: float = MAX_CONTROL_RATE, prefer: Sequence[Any] | None = None) -> int | None:
    """The index of the operating point among ``candidates`` (each one point's :class:`Alerting` on the calibration
    runs): within the caps (:func:`within_cap`), the most acquirers warned, then the fewest false alarms, then the
    largest ``prefer`` value (default: the median lead share, the earlier warning), then the first; None where no
    candidate is within the caps."""
    def key(index: int) -> tuple:
        found = candidates[index]
        shares = [found.shares[name] for name in found.leads]
        preferred = prefer[index] if prefer is not None else (statistics.median(shares) if shares else -math.inf)
        return found.warned.k, -found.false_alarms.k, preferred, -index

    within = [index for index, found in enumerate(candidates) if within_cap(found, max_false_rate, max_control_rate)]
    return max(within, key=key) if within else None


# ------------------------------------------------------------------------------------------- leads


@dataclass(frozen=True)
class RuleLead:
    """One rule's row: the point chosen on calibration runs (or its default) and what it did there and held out.

    Attributes:
        rule: the grid's name.
        geometric: whether it reads a geometric series.
        settings: the chosen point (or the default where none was chosen).
        chosen: whether a point met the caps on the calibration runs; False: ``settings`` is the default.
        points: how many points the grid holds.
        calibration: what it did on the calibration runs.
        heldout: what it did on the held-out runs.
    """

    rule: str
    geometric: bool
    settings: Mapping[str, Any]
    chosen: bool
    points: int
    calibration: Alerting
    heldout: Alerting

    @property
    def setting(self) -> str:
        """The operating point in words; where none was chosen, the default's."""
        if self.chosen:
            return describe(self.settings)
        if self.points == 1 and not self.settings:
            return "its one setting: not within the cap on the calibration runs"
        return f"none of {self.points} within the cap; at its default ({describe(self.settings)})"


def first_alerts(rules: Sequence[Rule], runs: Sequence[LabelledRun]) -> list[tuple[dict[str, int | None], int]]:
    """Each rule's first run-alert step on each run it can read, and how many runs it could not (left out). One run
    at a time: its prefixes are made once, for every rule."""
    found: list[tuple[dict[str, int | None], int]] = [({}, 0) for _ in rules]
    for run in runs:
        prefixes = [run.view.prefix(end) for end in range(1, len(run.view.steps) + 1)]
        for index, rule in enumerate(rules):
            fired, left_out = found[index]
            if rule.needs.missing(run.view.series, run.view.info):
                found[index] = fired, left_out + 1
                continue
            alert = first_alert(rule, run.view, prefixes)
            fired[run.name] = None if alert is None else alert.step
    return found


def _counted(runs: Sequence[LabelledRun], fired: Mapping[str, int | None], left_out: int) -> Alerting:
    return alerting([run for run in runs if run.name in fired], fired, left_out)


def rule_leads(grids: Sequence[RuleGrid], calibration: Sequence[LabelledRun], heldout: Sequence[LabelledRun],
               max_false_rate: float = MAX_FALSE_RATE, max_control_rate: float = MAX_CONTROL_RATE
               ) -> list[RuleLead]:
    """Per grid: its operating point chosen on ``calibration`` (module docstring), and what it did there and on
    ``heldout``. Nothing is chosen on a held-out run.

    Raises:
        ValueError: on a cap outside [0, 1], or two runs of one name in a set (a run's alert is found by its name).
    """
    for name, cap in (("max_false_rate", max_false_rate), ("max_control_rate", max_control_rate)):
        if not 0 <= cap <= 1:
            raise ValueError(f"{name} is a share of runs in [0, 1], got {cap!r}")
    for label, runs in (("calibration", calibration), ("held-out", heldout)):
        names = [run.name for run in runs]
        if len(set(names)) < len(names):
            raise ValueError(f"two {label} runs share a name: {sorted({n for n in names if names.count(n) > 1})}")
    found = []
    for grid in grids:
        points = grid.points()
        default = grid.default
        settings = points + ([default] if default not in points else [])
        rules = [grid.make(point) for point in settings]
        on_calibration = [_counted(calibration, *fired) for fired in first_alerts(rules[:len(points)], calibration)]
        chosen = choose(on_calibration, max_false_rate, max_control_rate)
        index = chosen if chosen is not None else settings.index(default)
        if index == len(points):  # the default, off the grid: replayed on calibration too
            on_calibration.append(_counted(calibration, *first_alerts(rules[-1:], calibration)[0]))
        held = _counted(heldout, *first_alerts([rules[index]], heldout)[0])
        found.append(RuleLead(grid.name, grid.geometric, settings[index], chosen is not None, len(points),
                              on_calibration[index], held))
    return found


def leads_table(leads: Sequence[RuleLead]) -> str:
    """Markdown: one row a rule, its operating point and its calibration counts, then its held-out record."""
    lines = [markdown_row(["rule", "operating point (chosen on calibration)", "calibration: acquirers warned; never "
                           "acquire, alerted; controls alerted", "held out: acquirers warned before acquisition",
                           "lead, steps: median [95%]", "lead, share of time to acquisition: median [95%]",
                           "false alarms: runs that never acquire", "controls alerted"]),
             markdown_row(["---"] * 8)]
    for lead in leads:
        cal, held = lead.calibration, lead.heldout
        if not cal.warned.n + cal.false_alarms.n + cal.controls.n:
            lines.append(markdown_row([lead.rule, f"not measured on the calibration runs ({cal.left_out} lack what "
                                       "it reads)", *["-"] * 6]))
            continue
        lines.append(markdown_row([
            lead.rule, lead.setting, f"{_kn(cal.warned)}; {_kn(cal.false_alarms)}; {_kn(cal.controls)}",
            _kn(held.warned), held.lead_steps.text(0), held.lead_share.text(2), str(held.false_alarms),
            _kn(held.controls) + (f" ({held.left_out} runs lack what it reads)" if held.left_out else "")]))
    return "\n".join(lines)


def _kn(rate: Rate) -> str:
    return f"{rate.k} of {rate.n}"
