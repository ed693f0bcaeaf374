"""The live tracker: one run's evaluation record, the rules it runs, their alerts and forecasts, its summary.

The Lightning callback (:class:`~capgeo_callbacks.PrecursorDetector`), the Hugging Face callback and a plain
Python loop all feed one :class:`RunTracker` at each evaluation; offline analysis replays a finished run
through the same object, so the alerts, forecasts and summary are the same whichever fed it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from capgeo_callbacks.detection.alerts import Alert
from capgeo_callbacks.detection.events import detect_acquisition
from capgeo_callbacks.detection.series import Points, as_float, as_step, split_points
from capgeo_callbacks.detection.settings import DetectionSettings
from capgeo_callbacks.rules.base import Forecast, Rule, RunView
from capgeo_callbacks.rules.geometry import StudyRule

__all__ = ["RunTracker", "TrackerUpdate"]


@dataclass(frozen=True)
class TrackerUpdate:
    """What one evaluation brought: the alerts raised and the forecasts made at it."""

    alerts: list[Alert] = field(default_factory=list)
    forecasts: list[Forecast] = field(default_factory=list)


class RunTracker:
    """Owns one run's record (accuracy and every recorded scalar), runs its rules at each evaluation, and
    builds the summary.

    Args:
        rules: the rules to run live (default: the study's rule on ``settings``); names must be unique.
        settings: detection settings (acquisition, labels, collapse; the study rule's).
        run_info: what is known of the run before it starts (task, budget, warm-up, chance...): stored at the top
            of the summary and shown to the rules.
        monitor: the accuracy's logged name (the summary's ``monitor``; its series is ``acc``).
        logprob_key: the answer log-prob's name among the scalars (log-prob emergence, loss rules).
        token_acc_key: the per-token accuracy's name among the scalars (chance label).
        rankme_prefix: tag prefix of the RankMe series.

    Example::

        tracker = RunTracker(rules=[StudyRule(), LossOnsetRule()])
        for step, acc, scalars, measured in evaluations:
            update = tracker.update(step, acc, scalars, measured)
            for alert in update.alerts:
                print(alert)
        summary = tracker.summary(measured)
    """

    def __init__(self, rules: Sequence[Rule] | None = None, settings: DetectionSettings | None = None,
                 run_info: Mapping[str, Any] | None = None, monitor: str = "val/acc",
                 logprob_key: str | None = "val/logprob", token_acc_key: str | None = "val/token_acc",
                 rankme_prefix: str = "rankme/") -> None:
        if settings is not None and not isinstance(settings, DetectionSettings):
            raise ValueError(f"settings must be a DetectionSettings, got {type(settings).__name__}")
        self.settings = settings if settings is not None else DetectionSettings()
        self.rules = list(rules) if rules is not None else [StudyRule(self.settings, rankme_prefix)]
        bad = [rule for rule in self.rules if not isinstance(rule, Rule)]
        if bad:
            raise ValueError(f"rules must be capgeo_callbacks.rules.Rule objects, got {bad!r}")
        names = [rule.name for rule in self.rules]
        if len(set(names)) != len(names):
            raise ValueError(f"rule names must be unique, got {names}")
        self.run_info = dict(run_info or {})
        self.monitor, self.logprob_key, self.token_acc_key = monitor, logprob_key, token_acc_key
        self.rankme_prefix = rankme_prefix
        self.acc: list[list[float]] = []  # [[step, accuracy], ...]: the run's evaluation steps
        self.scalars: dict[str, list[list[float]]] = {}  # every other recorded scalar, by tag
        self.alerts: list[Alert] = []  # every rule's, in the order raised
        self.forecasts: dict[str, list[Forecast]] = {}  # by rule

    @property
    def steps(self) -> list[int]:
        return [int(point[0]) for point in self.acc]

    @property
    def acquired_step(self) -> int | None:
        """The acquisition step, once confirmed; None before."""
        steps, accs = split_points(self.acc)
        return detect_acquisition(steps, accs, self.settings.threshold, self.settings.patience)

    def view(self, measured: Mapping[str, Points] | None = None) -> RunView:
        """The run so far as the rules see it."""
        return RunView.from_points(self.acc, {**(measured or {}), **self.scalars}, self.run_info)

    def update(self, step: int, acc: float, scalars: Mapping[str, float] | None = None,
               measured: Mapping[str, Points] | None = None) -> TrackerUpdate:
        """Record one evaluation (``acc`` and ``scalars`` at ``step``; ``measured``: the measure series so far,
        owned by whoever measures them) and run every rule on the run so far. An evaluation at or before the
        last one recorded is ignored (a resumed run that measures its resume step again)."""
        step, value = as_step(step), as_float("acc", acc)
        if self.acc and step <= self.acc[-1][0]:
            return TrackerUpdate()
        self.acc.append([step, value])
        for tag, scalar in (scalars or {}).items():
            scalar = as_float(tag, scalar)
            if math.isfinite(scalar):
                self.scalars.setdefault(tag, []).append([step, scalar])
        view = self.view(measured)
        update = TrackerUpdate()
        for rule in self.rules:
            output = rule.update(view, [alert for alert in self.alerts if alert.rule == rule.name])
            self.alerts += output.alerts
            update.alerts.extend(output.alerts)
            if output.forecast is not None:
                self.forecasts.setdefault(rule.name, []).append(output.forecast)
                update.forecasts.append(output.forecast)
        return update

    def summary(self, measured: Mapping[str, Points] | None = None, *, steps: int | None = None,
                parameters: int | None = None, rows: Mapping[str, int] | None = None,
                selectors: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The run summary (:func:`~capgeo_callbacks.run.summary.build_summary`) with the rules, their alerts and
        their forecasts."""
        from capgeo_callbacks.run.summary import build_summary  # the summary module imports detection

        scalars = {tag: points for tag, points in self.scalars.items() if tag != self.logprob_key}
        summary = build_summary(
            acc=self.acc, series={**(measured or {}), **scalars}, settings=self.settings, alerts=self.alerts,
            monitor=self.monitor, rankme_prefix=self.rankme_prefix, logprob_key=self.logprob_key,
            logprob=self.scalars.get(self.logprob_key, []) if self.logprob_key else None,
            token_acc_key=self.token_acc_key, run_info=self.run_info, steps=steps, parameters=parameters,
            rows=rows, selectors=selectors)
        summary["rules"] = {rule.name: rule.settings() for rule in self.rules}
        summary["forecasts"] = {name: [forecast_record(f) for f in made] for name, made in self.forecasts.items()}
        return summary

    def state_dict(self) -> dict[str, Any]:
        return {"acc": [list(p) for p in self.acc],
                "scalars": {tag: [list(p) for p in points] for tag, points in self.scalars.items()},
                "alerts": [asdict(alert) for alert in self.alerts],
                "forecasts": {name: [forecast_record(f) for f in made] for name, made in self.forecasts.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.acc = [list(p) for p in state.get("acc", [])]
        self.scalars = {tag: [list(p) for p in points] for tag, points in state.get("scalars", {}).items()}
        known = {item.name for item in fields(Alert)}
        self.alerts = [Alert(**{k: tuple(v) if k == "layers" else v for k, v in alert.items() if k in known})
                       for alert in state.get("alerts", [])]
        self.forecasts = {name: [forecast_from_record(name, record) for record in made]
                          for name, made in state.get("forecasts", {}).items()}


def forecast_record(forecast: Forecast) -> dict[str, Any]:
    """A forecast as JSON: ``predicted`` None with ``beyond`` true when it is not expected within reach."""
    beyond = forecast.predicted is not None and math.isinf(forecast.predicted)
    finite = lambda value: None if value is None or math.isinf(value) else float(value)  # noqa: E731
    return {"step": forecast.step, "predicted": finite(forecast.predicted), "beyond": beyond,
            "low": finite(forecast.low), "high": finite(forecast.high)}


def forecast_from_record(rule: str, record: Mapping[str, Any]) -> Forecast:
    predicted = math.inf if record.get("beyond") else record.get("predicted")
    high = record.get("high")
    return Forecast(rule, int(record["step"]), predicted, record.get("low"),
                    math.inf if high is None and predicted is not None else high)
