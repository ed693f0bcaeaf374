"""The tracker: one run's evaluation record, the rules it runs on it, their alerts and forecasts.

Fed one evaluation at a time by the run session (:class:`~capgeo_callbacks.run.session.RunSession`), live or
offline; a plain Python loop can feed it too. Each rule is asked through
:func:`~capgeo_callbacks.rules.rule_output`, as a replay asks it, so the record is the same whoever feeds it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from capgeo_callbacks.detection.alerts import Alert, alert_from_record
from capgeo_callbacks.detection.series import Points, as_float, as_step
from capgeo_callbacks.detection.settings import DetectionSettings
from capgeo_callbacks.keys import LOGPROB, RANKME_RECOVERY, TOKEN_ACC, RunKeys
from capgeo_callbacks.rules.base import Forecast, Rule, RunView, rule_output
from capgeo_callbacks.rules.geometry import RankMeRecoveryRule
from capgeo_callbacks.run.summary import build_summary
from capgeo_callbacks.run.view import SessionView

__all__ = ["RunTracker", "TrackerUpdate", "forecast_from_record", "forecast_record", "record_of"]


@dataclass(frozen=True)
class TrackerUpdate:
    """What one evaluation brought: the alerts raised and the forecasts made at it, and (at the first evaluation)
    the rules left out for lack of their inputs, with the keys each lacks."""

    alerts: list[Alert] = field(default_factory=list)
    forecasts: list[Forecast] = field(default_factory=list)
    left_out: dict[str, list[str]] = field(default_factory=dict)


class RunTracker:
    """Owns one run's record (accuracy and every recorded scalar), runs its rules at each evaluation, and
    builds the summary.

    At the first evaluation, each rule whose needs (:class:`~capgeo_callbacks.rules.Needs`) the run does not meet
    is left out: it emits nothing for the rest of the run, and the update names what it lacks.

    Args:
        rules: the rules to run (default: ``rankme-recovery`` on ``settings``); names must be unique.
        settings: detection settings (acquisition, labels, collapse: ``rankme-recovery``'s).
        run_info: what is known of the run before it starts (task, budget, warm-up, chance...): stored at the top
            of the summary and shown to the rules as run facts.
        keys: the names of what the run records (:class:`~capgeo_callbacks.keys.RunKeys`: the accuracy's logged name,
            the summary's ``monitor``, whose series is ``acc``; the user's names of the log-prob, per-token accuracy
            and loss, recorded as ``val/logprob``, ``val/token_acc`` and ``val/loss``; RankMe's tag prefix).

    Example::

        tracker = RunTracker(rules=[RankMeRecoveryRule(), LossOnsetRule()])
        for step, acc, scalars, measured in evaluations:
            update = tracker.update(step, acc, scalars, measured)
            for alert in update.alerts:
                print(alert.message())
        summary = tracker.summary(measured)
    """

    def __init__(self, rules: Sequence[Rule] | None = None, settings: DetectionSettings | None = None,
                 run_info: Mapping[str, Any] | None = None, keys: RunKeys | None = None) -> None:
        if settings is not None and not isinstance(settings, DetectionSettings):
            raise ValueError(f"settings must be a DetectionSettings, got {type(settings).__name__}")
        if run_info is not None and not isinstance(run_info, Mapping):
            raise ValueError(f"run_info must be a mapping of summary fields, got {type(run_info).__name__}")
        self.settings = settings if settings is not None else DetectionSettings()
        self.keys = keys if keys is not None else RunKeys()
        self.rules = list(rules) if rules is not None else [RankMeRecoveryRule(self.settings, self.keys.rankme_prefix)]
        bad = [rule for rule in self.rules if not isinstance(rule, Rule)]
        if bad:
            raise ValueError(f"rules must be capgeo_callbacks.rules.Rule objects, got {bad!r}")
        names = [rule.name for rule in self.rules]
        if len(set(names)) != len(names):
            raise ValueError(f"rule names must be unique, got {names}")
        self.run_info = dict(run_info or {})
        self.acc: list[list[float]] = []  # [[step, accuracy], ...]: the run's evaluation steps
        self.scalars: dict[str, list[list[float]]] = {}  # every other recorded scalar, by tag
        self.alerts: list[Alert] = []  # every rule's, in the order raised
        self.forecasts: dict[str, list[Forecast]] = {}  # by rule
        self.left_out: dict[str, list[str]] = {}  # rule -> the keys it lacked at the first evaluation
        self.latest = SessionView.empty(self.keys, self.settings, self.run_info)  # rebuilt at every evaluation

    @property
    def steps(self) -> list[int]:
        return [int(point[0]) for point in self.acc]

    def view(self, measured: Mapping[str, Points] | None = None) -> RunView:
        """The run so far as the rules see it."""
        return RunView.from_points(self.acc, {**(measured or {}), **self.scalars}, self.run_info, self.settings)

    def update(self, step: int, acc: float, scalars: Mapping[str, float] | None = None,
               measured: Mapping[str, Points] | None = None) -> TrackerUpdate:
        """Record one evaluation (``acc`` and ``scalars`` at ``step``; ``measured``: the measure series so far,
        owned by whoever measures them) and run every rule on the run so far. An evaluation at or before the
        last one recorded is ignored (a resumed run that measures its resume step again)."""
        step, value = as_step(step), as_float("acc", acc)
        if self.acc and step <= self.acc[-1][0]:
            return TrackerUpdate()
        first = not self.acc
        self.acc.append([step, value])
        given, renamed = scalars or {}, self.keys.renamed
        named = {tag: value for tag, value in given.items() if tag not in renamed}
        named.update({renamed[tag]: value for tag, value in given.items() if tag in renamed})  # theirs win
        for tag, scalar in named.items():
            scalar = as_float(tag, scalar)
            if math.isfinite(scalar):
                self.scalars.setdefault(tag, []).append([step, scalar])
        view = self.view(measured)
        update = TrackerUpdate()
        if first:
            self.left_out = {rule.name: missing for rule in self.rules
                             if (missing := rule.needs.missing(view.series, self.run_info))}
            update.left_out.update(self.left_out)
        for rule in self.rules:
            if rule.name in self.left_out:
                continue
            output = rule_output(rule, view, [alert for alert in self.alerts if alert.rule == rule.name])
            self.alerts += output.alerts
            update.alerts.extend(output.alerts)
            if output.forecast is not None:
                self.forecasts.setdefault(rule.name, []).append(output.forecast)
                update.forecasts.append(output.forecast)
        self.latest = SessionView(view, self.keys, tuple(self.alerts), {f.rule: f for f in update.forecasts},
                                  {name: tuple(missing) for name, missing in self.left_out.items()})
        return update

    def summary(self, measured: Mapping[str, Points] | None = None, *, steps: int | None = None,
                parameters: int | None = None, rows: Mapping[str, int] | None = None,
                selectors: Mapping[str, str] | None = None, left_out: Mapping[str, str] | None = None
                ) -> dict[str, Any]:
        """The run summary (:func:`~capgeo_callbacks.run.summary.build_summary`) with the rules, those left out,
        their alerts and their forecasts, and the measures ``left_out`` for lack of their inputs (by tag prefix, with
        why)."""
        keys = self.keys
        summary = build_summary(
            acc=self.acc, series={**(measured or {}), **self.scalars}, settings=self.settings, alerts=self.alerts,
            monitor=keys.monitor, rankme_prefix=keys.rankme_prefix, logprob_key=LOGPROB if keys.logprob_key else None,
            token_acc_key=TOKEN_ACC if keys.token_acc_key else None, run_info=self.run_info, steps=steps,
            parameters=parameters, rows=rows, selectors=selectors)
        summary["rules"] = {rule.name: rule.settings() for rule in self.rules}
        if self.left_out:
            summary["rules_left_out"] = {name: list(missing) for name, missing in self.left_out.items()}
        if left_out:
            summary["measures_left_out"] = dict(left_out)
        summary["forecasts"] = {name: [forecast_record(f) for f in made] for name, made in self.forecasts.items()}
        return summary

    def state_dict(self) -> dict[str, Any]:
        return {"acc": [list(p) for p in self.acc],
                "scalars": {tag: [list(p) for p in points] for tag, points in self.scalars.items()},
                "alerts": [asdict(alert) for alert in self.alerts],
                "forecasts": {name: [forecast_record(f) for f in made] for name, made in self.forecasts.items()},
                "left_out": {name: list(missing) for name, missing in self.left_out.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.acc = [list(p) for p in state.get("acc", [])]
        self.scalars = {tag: [list(p) for p in points] for tag, points in state.get("scalars", {}).items()}
        self.alerts = [alert_from_record(alert) for alert in state.get("alerts", [])]
        self.forecasts = {name: [forecast_from_record(name, record) for record in made
                                 if record.get("predicted") is not None or record.get("beyond")]
                          for name, made in state.get("forecasts", {}).items()}
        self.left_out = {name: list(missing) for name, missing in state.get("left_out", {}).items()}
        latest = self.view()  # the measures' series are their owners': they join at the next evaluation
        self.latest = SessionView(latest, self.keys, tuple(self.alerts),
                                  {name: made[-1] for name, made in self.forecasts.items()
                                   if made and latest.steps and made[-1].step == latest.steps[-1]},
                                  left_out={name: tuple(missing) for name, missing in self.left_out.items()})


def forecast_record(forecast: Forecast) -> dict[str, Any]:
    """A forecast as JSON: ``predicted`` None with ``beyond`` true when it is not expected within reach."""
    beyond = math.isinf(forecast.predicted)
    finite = lambda value: None if value is None or math.isinf(value) else float(value)  # noqa: E731
    record = {"step": forecast.step, "predicted": finite(forecast.predicted), "beyond": beyond,
              "low": finite(forecast.low), "high": finite(forecast.high)}
    if forecast.probability is not None:
        record["probability"] = float(forecast.probability)
    return record


def forecast_from_record(rule: str, record: Mapping[str, Any]) -> Forecast:
    predicted = math.inf if record.get("beyond") else float(record["predicted"])
    high = record.get("high")
    return Forecast(rule, int(record["step"]), predicted, record.get("low"), math.inf if high is None else high,
                    record.get("probability"))


def record_of(state: Mapping[str, Any], logprob_key: str | None = LOGPROB) -> dict[str, Any]:
    """The tracker's record in a checkpointed state: under ``record``, or in the two earlier layouts (a ``tracker``
    with parallel ``steps`` and ``acc`` lists and the log-prob as ``logprob_series``; or ``acc``, ``scalars`` or
    ``logprob`` and ``alerts`` at the top level), whose alerts are ``rankme-recovery``'s."""
    if "record" in state:
        return dict(state["record"])
    older = state.get("tracker", {})
    pairs = zip(older.get("steps", []), older.get("acc", []), strict=True)
    acc = [[s, a] for s, a in pairs if a is not None] if "tracker" in state else state.get("acc", [])
    scalars = dict(state.get("scalars", {}))
    logprob = state.get("logprob_series", state.get("logprob", []))
    if logprob and logprob_key and logprob_key not in scalars:
        scalars[logprob_key] = logprob
    alerts = [{**alert, "rule": alert.get("rule", RANKME_RECOVERY)} for alert in state.get("alerts", [])]
    return {"acc": acc, "scalars": scalars, "alerts": alerts}
