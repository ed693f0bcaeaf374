"""The rule protocol: what a warning rule or a forecaster is, and how one is run over a run's series.

A rule reads a run's series as they arrive. At each evaluation it is called with a :class:`RunView` of the
series so far and the alerts it has already raised, and returns the alerts it raises now and, if it forecasts,
its :class:`Forecast` of the acquisition step. It may keep no other state: its output is a function of the
prefix and of its own alerts, so a rule replayed offline on a finished run (:func:`replay`) says what it said
live, given the run facts it had live (``info``: a fact added to a summary after the run, such as a budget, can
change what a replay says; docs/design.md). Every caller (the live tracker, :func:`replay`, the scorer) asks a
rule through :func:`rule_output`, the one place that decides which forecasts are recorded. A rule declares what it reads
(:class:`Needs`); a run that lacks it at its first evaluation leaves the rule out, and says so once.

Writing a rule::

    class AccuracyAbove(Rule):
        name = "acc-above-0.3"

        def update(self, run, raised):
            if not raised and run.last("acc") >= 0.3:
                return RuleOutput(alerts=[self.alert(run, "accuracy reached 0.3")])
            return RuleOutput()

and it is scored like every other rule: ``python -m capgeo_callbacks.scoring RUNS --rules acc-above-0.3``
once registered (:func:`~capgeo_callbacks.rules.register_rule`).

A rule renamed keeps its former names: a file (a summary, a checkpoint, a registration) that wrote one is read
silently as the rule's name now (:data:`~capgeo_callbacks.keys.RENAMED_RULES`, :data:`RENAMED_CLASSES`); code that
passes one gets the rule with a ``DeprecationWarning``, once (:func:`deprecated_name`).
"""

from __future__ import annotations

import importlib
import math
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import Any

from capgeo_callbacks.detection.alerts import Alert
from capgeo_callbacks.detection.events import detect_acquisition
from capgeo_callbacks.detection.series import Points
from capgeo_callbacks.detection.settings import DEFAULT_SETTINGS, DetectionSettings
from capgeo_callbacks.detection.warmup import warmup_from_lr
from capgeo_callbacks.keys import ACC, LOGPROB, LR, VAL_LOSS, rule_name
from capgeo_callbacks.run.failures import WarnOnce, warn_at_caller

__all__ = ["RENAMED_CLASSES", "Forecast", "Needs", "Rule", "RuleOutput", "RunView", "deprecated_name", "replay",
           "rule_from_record", "rule_output", "rule_record"]

# a rule class's former path -> its path now (a registration or checkpoint records the class path)
RENAMED_CLASSES = {"capgeo_callbacks.rules.geometry.StudyRule": "capgeo_callbacks.rules.geometry.RankMeRecoveryRule"}
_DEPRECATED = WarnOnce(emit=partial(warn_at_caller, category=DeprecationWarning))


def deprecated_name(former: str, now: str) -> None:
    """Say once, as a ``DeprecationWarning`` at the user's line, that code passed a rule's ``former`` name."""
    _DEPRECATED(former, f"{former!r} is a former name of {now!r}; use {now!r} (the former name will be removed)")


def renamed_class(module: str, name: str, scope: Mapping[str, Any]) -> type:
    """A module's ``__getattr__``: the class a former class name ``name`` now is (:data:`RENAMED_CLASSES`), where
    the module holds it (``scope``), with a ``DeprecationWarning``; else the usual ``AttributeError``."""
    for former, now in RENAMED_CLASSES.items():
        current = now.rpartition(".")[2]
        if former.rpartition(".")[2] == name and current in scope:
            deprecated_name(name, current)
            return scope[current]
    raise AttributeError(f"module {module!r} has no attribute {name!r}")


class Prefix(Mapping[str, tuple[float, ...]]):
    """Series up to their ``end``-th value, each cut when first read: replaying makes a prefix at every evaluation,
    and a rule reads a few of a run's many series."""

    __slots__ = ("_cut", "_end", "_whole")

    def __init__(self, whole: Mapping[str, tuple[float, ...]], end: int) -> None:
        self._whole, self._end = whole, end
        self._cut: dict[str, tuple[float, ...]] = {}

    @classmethod
    def of(cls, series: Mapping[str, tuple[float, ...]], end: int) -> Prefix:
        """``series`` up to ``end`` (a prefix of a prefix cuts the whole series once)."""
        if isinstance(series, Prefix):
            return cls(series._whole, min(end, series._end))
        return cls(series, end)

    def __getitem__(self, tag: str) -> tuple[float, ...]:
        cut = self._cut.get(tag)
        if cut is None:
            cut = self._cut[tag] = self._whole[tag][:self._end]
        return cut

    def __contains__(self, tag: object) -> bool:
        return tag in self._whole

    def __iter__(self) -> Iterator[str]:
        return iter(self._whole)

    def __len__(self) -> int:
        return len(self._whole)

    def __repr__(self) -> str:
        return repr(dict(self))


@dataclass(frozen=True)
class RunView:
    """A run's series up to an evaluation, aligned on its evaluation steps (NaN where a value is missing).

    Attributes:
        steps: the evaluation steps so far (those of the accuracy series).
        series: every series by tag: ``acc`` (the monitored accuracy), ``val/logprob``, ``val/token_acc``,
            ``val/loss``, ``train/loss``, ``lr``, ``rankme/<layer>``, ``probe_acc/<layer>``, ...
        info: what is known of the run before it starts: ``task``, ``difficulty``, ``max_steps``,
            ``warmup_steps``, ``chance`` (the input-independent answer's scores), ``seed``... Any may be missing (a
            warm-up not declared is read from the ``lr`` series: :attr:`warmup_steps`).
        settings: the run's detection settings: acquisition (:attr:`acquired_step`) is read with their threshold and
            patience, by every rule alike.
    """

    steps: tuple[int, ...]
    series: Mapping[str, tuple[float, ...]]
    info: Mapping[str, Any] = field(default_factory=dict)
    settings: DetectionSettings = DEFAULT_SETTINGS

    @classmethod
    def from_points(cls, acc: Points, series: Mapping[str, Points], info: Mapping[str, Any] | None = None,
                    settings: DetectionSettings = DEFAULT_SETTINGS) -> RunView:
        """A view from ``[[step, value], ...]`` series; the steps are the accuracy's."""
        steps = tuple(int(p[0]) for p in acc)
        aligned = {ACC: tuple(float(p[1]) for p in acc)}
        for tag, points in series.items():
            if tag != ACC:
                at = {int(p[0]): float(p[1]) for p in points if p[1] is not None}
                aligned[tag] = tuple(at.get(step, math.nan) for step in steps)
        return cls(steps, aligned, dict(info or {}), settings)

    @cached_property
    def acquired_step(self) -> int | None:
        """The acquisition step, once confirmed by the evaluations so far (``settings``' threshold held for
        ``patience`` evaluations); None before. Computed once per view."""
        return detect_acquisition(self.steps, self.values(ACC), self.settings.threshold, self.settings.patience)

    def prefix(self, end: int) -> RunView:
        """The view at the ``end``-th evaluation (the first ``end`` evaluations)."""
        return RunView(self.steps[:end], Prefix.of(self.series, end), self.info, self.settings)

    @property
    def step(self) -> int:
        """The step of the latest evaluation."""
        return self.steps[-1]

    def values(self, tag: str) -> tuple[float, ...]:
        """The series ``tag`` at every evaluation so far (all NaN if the run has no such series)."""
        return self.series.get(tag, (math.nan,) * len(self.steps))

    def last(self, tag: str) -> float:
        return self.values(tag)[-1] if self.steps else math.nan

    def logprob(self, tag: str = LOGPROB) -> tuple[float, ...]:
        """The answer's mean log-prob: the series ``tag``, or, where the run records none, minus its loss
        (``val/loss``, the cross-entropy per target token)."""
        values = self.values(tag)
        if any(math.isfinite(value) for value in values):
            return values
        return tuple(-value for value in self.values(VAL_LOSS))

    def tags(self, prefix: str) -> list[str]:
        """The tags starting with ``prefix``, in the order the run recorded them."""
        return [tag for tag in self.series if tag.startswith(prefix)]

    @property
    def max_steps(self) -> int | None:
        value = self.info.get("max_steps")
        return None if value is None else int(value)

    @property
    def warmup_steps(self) -> int | None:
        """The run's declared ``warmup_steps``, else the warm-up read from its recorded learning rate
        (:func:`~capgeo_callbacks.detection.warmup.warmup_from_lr`), else None."""
        value = self.info.get("warmup_steps")
        return warmup_from_lr(self.steps, self.values(LR)) if value is None else int(value)


@dataclass(frozen=True)
class Needs:
    """What a rule reads: series of the run (tags, ``prefix/*`` for at least one tag under a prefix, such as
    ``rankme/*``, or alternatives ``a|b``, either of which will do) and run facts (keys of the run info, such as
    ``chance`` or ``warmup_steps``).

    A rule whose needs are not met at a run's first evaluation is left out of that run: it emits nothing, and the
    run says once which key is missing and how to record it (:func:`~capgeo_callbacks.keys.how_to_record`).
    """

    series: tuple[str, ...] = (ACC,)
    facts: tuple[str, ...] = ()

    def missing(self, tags: Collection[str], info: Mapping[str, Any]) -> list[str]:
        """The needed keys a run with series ``tags`` and run facts ``info`` lacks, in the order declared."""
        return [key for key in self.series if not any(_matches(key, tag) for tag in tags)] + \
            [key for key in self.facts if info.get(key) is None]

    def reads(self, tag: str) -> bool:
        """Whether the series ``tag`` is one this rule reads (the overhead budget never thins those)."""
        return any(_matches(key, tag) for key in self.series)


def _matches(key: str, tag: str) -> bool:
    """Whether the series ``tag`` meets the needed ``key`` (a tag, ``prefix/*``, or alternatives ``a|b``)."""
    if "|" in key:
        return any(_matches(part, tag) for part in key.split("|"))
    if key.endswith("/*"):
        return tag.startswith(key[:-1])
    return key == tag


@dataclass(frozen=True)
class Forecast:
    """A forecast of the acquisition step, made at ``step``: always of a later step, its interval ordered around
    it (``step < low <= predicted <= high``; see :meth:`ahead`).

    Attributes:
        rule: the forecaster's name.
        step: the evaluation step at which it was made.
        predicted: the predicted acquisition step; ``math.inf`` when it is not expected within reach (beyond the
            budget, or no progress).
        low: lower end of the interval (None: none).
        high: upper end of the interval (``math.inf`` allowed; None: none).
        probability: the probability of acquisition within the budget, from a forecaster that gives one (None:
            none).
    """

    rule: str
    step: int
    predicted: float
    low: float | None = None
    high: float | None = None
    probability: float | None = None

    def within(self, horizon: float) -> bool:
        """Whether it puts acquisition within ``horizon`` steps of ``step``."""
        return math.isfinite(self.predicted) and self.predicted - self.step <= horizon

    def ahead(self) -> Forecast:
        """This forecast as one of the future: acquisition that is not yet confirmed happens at the earliest at the
        next step, so a prediction at or before ``step`` becomes ``step + 1``, and the interval is ordered around
        the prediction and kept after ``step``."""
        earliest = self.step + 1
        predicted = max(self.predicted, earliest)
        low = None if self.low is None else min(max(self.low, earliest), predicted)
        high = None if self.high is None else max(self.high, predicted)
        return Forecast(self.rule, self.step, predicted, low, high, self.probability)


@dataclass(frozen=True)
class RuleOutput:
    """What a rule says at one evaluation: the alerts it raises now, and its forecast (if it forecasts)."""

    alerts: tuple[Alert, ...] | list[Alert] = ()
    forecast: Forecast | None = None


class Rule(ABC):
    """A warning rule, or a forecaster (module docstring). Subclasses set ``name`` and implement ``update``.

    Attributes:
        name: how summaries, logs and tables name the rule (unique among a run's rules).
        needs: the series and run facts it reads (:class:`Needs`); a run without them leaves the rule out.
    """

    name: str = "rule"
    needs: Needs = Needs()

    @abstractmethod
    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        """The rule's output at the latest evaluation of ``run``, given the alerts it raised before."""

    def settings(self) -> dict[str, Any]:
        """The rule's settings as a JSON-able dict (what a registration file freezes); ``from_settings`` of the
        same class rebuilds the rule from it."""
        return {}

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> Rule:
        """The rule :meth:`settings` describes."""
        return cls(**settings)

    def first_run_alert(self, run: RunView, prefixes: Sequence[RunView] | None = None) -> Alert | None:
        """The first run alert this rule raises on ``run`` replayed evaluation by evaluation (through
        :func:`rule_output`, as live), or None. ``prefixes``: the run's views at each evaluation, made once where
        several rules replay one run. A rule whose alert at an evaluation depends on the series so far alone may
        find it in one pass over the whole run instead; it must find the same alert."""
        alerts: list[Alert] = []
        views = prefixes if prefixes is not None else (run.prefix(end) for end in range(1, len(run.steps) + 1))
        for view in views:
            output = rule_output(self, view, alerts)
            alerts += output.alerts
            fired = [alert for alert in output.alerts if alert.kind == "run"]
            if fired:
                return fired[0]
        return None

    def alert(self, run: RunView, evidence: str, layer: str = "") -> Alert:
        """A run alert of this rule at the latest evaluation, with its evidence in words."""
        return Alert(kind="run", layer=layer, step=run.step, rule=self.name, evidence=evidence)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings()})"


def rule_output(rule: Rule, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
    """What ``rule`` says at the latest evaluation of ``run``, as a run records it: its alerts, and its forecast
    only while acquisition is not confirmed (:attr:`RunView.acquired_step`), moved ahead of the step it is made at
    (:meth:`Forecast.ahead`). The live tracker, :func:`replay` and the scorer all ask a rule through here."""
    output = rule.update(run, raised)
    forecast = output.forecast
    if forecast is not None:
        forecast = None if run.acquired_step is not None else forecast.ahead()
    return RuleOutput(list(output.alerts), forecast)


def replay(rule: Rule, run: RunView, until: int | None = None,
           settings: DetectionSettings | None = None) -> tuple[list[Alert], list[Forecast]]:
    """Every alert and forecast ``rule`` would have emitted live on ``run``, evaluation by evaluation
    (up to the ``until``-th evaluation), acquisition read with ``settings`` (default: the view's)."""
    run = run if settings is None else replace(run, settings=settings)
    alerts: list[Alert] = []
    forecasts: list[Forecast] = []
    for end in range(1, (len(run.steps) if until is None else until) + 1):
        output = rule_output(rule, run.prefix(end), alerts)
        alerts += output.alerts
        if output.forecast is not None:
            forecasts.append(output.forecast)
    return alerts, forecasts


def rule_record(rule: Rule) -> dict[str, Any]:
    """How a rule is written down (a checkpoint, a registration file): its name, class path and settings."""
    return {"name": rule.name, "class": f"{type(rule).__module__}.{type(rule).__qualname__}",
            "settings": rule.settings()}


def rule_from_record(record: Mapping[str, Any]) -> Rule:
    """The rule a :func:`rule_record` (or a registration file's entry) describes; a former class path or name is
    read as the rule's now, silently (module docstring).

    Raises:
        ValueError: if the class path does not name a rule.
    """
    path = str(record["class"])
    module, _, name = RENAMED_CLASSES.get(path, path).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"{record['class']!r} does not name a rule class ({err})") from None
    if not (isinstance(cls, type) and issubclass(cls, Rule)):
        raise ValueError(f"{record['class']!r} is not a capgeo_callbacks.rules.Rule")
    rule = cls.from_settings(record.get("settings") or {})
    if record.get("name"):
        rule.name = rule_name(str(record["name"]))
    return rule
