r"""The run session
===============

One run, whatever trains it. The session owns the run's record and rules (its
:class:`~capgeo_callbacks.run.tracker.RunTracker`), announces each alert once (a ``logging`` warning on the
``capgeo`` logger, an alert to the publisher, ``on_alert``), publishes what the run shows (each forecast as
``forecast/<rule>``, the dashboard's series, the story figure, the verdict, hparams) and writes the summary once.

The Lightning callback (:class:`~capgeo_callbacks.PrecursorDetector`), the Hugging Face callback
(:class:`~capgeo_callbacks.integrations.hf.CapgeoTrainerCallback`) and offline analysis of checkpoints are
adapters: each reads the accuracy, the scalars and the measured series where its framework keeps them and feeds
them here, so a run gives the same alerts, forecasts and summary whichever adapter fed it.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from capgeo_callbacks.detection.alerts import Alert
from capgeo_callbacks.detection.series import Points
from capgeo_callbacks.detection.settings import DetectionSettings
from capgeo_callbacks.keys import (
    FORECAST,
    LOGPROB,
    PROBABILITY,
    RANKME,
    TOKEN_ACC,
    VAL_ACC,
    VAL_LOSS,
    RunKeys,
    by_layer,
    how_to_record,
    key_words,
)
from capgeo_callbacks.publish.dashboard import OVERHEAD_TAG, custom_scalars_layout, dashboard_scalars
from capgeo_callbacks.publish.figures import figure_pixels, rankme_heatmap, story_card
from capgeo_callbacks.publish.publisher import Publisher
from capgeo_callbacks.publish.text import verdict_table
from capgeo_callbacks.rules.base import Rule, rule_from_record, rule_record
from capgeo_callbacks.run.budget import FIXED, OverheadBudget, check_overhead_budget
from capgeo_callbacks.run.failures import WarnOnce, check_callable
from capgeo_callbacks.run.reading import overhead_line
from capgeo_callbacks.run.summary import SUMMARY_FILENAME, json_safe, write_summary
from capgeo_callbacks.run.tracker import RunTracker, TrackerUpdate, record_of
from capgeo_callbacks.run.view import SessionView

__all__ = ["EARLY_SHARE", "Measurements", "RunSession"]

log = logging.getLogger("capgeo")
EARLY_SHARE = 0.1  # the dashboard's early charts: the first tenth of the budget, where the schedule is dense
DETECTOR_WORK, FIGURES_WORK = "detector", "figures"  # the session's own work in the overhead budget


@dataclass(frozen=True)
class Measurements:
    """What the measures hold when the session reads them.

    Attributes:
        series: every measured series by tag (``rankme/<layer>`` in depth order, ``probe_acc/<layer>``, ...).
        rows: the rows each tag was measured on (RankMe is only comparable at equal N).
        selectors: the token selector of each measure prefix (``{"rankme": "first_answer"}``).
        parameters: the model's parameter count.
        left_out: the measures left out for lack of their inputs, by tag prefix, with why (``{"ildr": "..."}``):
            the summary's ``measures_left_out``.
    """

    series: Mapping[str, Points] = field(default_factory=dict)
    rows: Mapping[str, int] = field(default_factory=dict)
    selectors: Mapping[str, str] = field(default_factory=dict)
    parameters: int | None = None
    left_out: Mapping[str, str] = field(default_factory=dict)


class RunSession:
    """One run's record, rules, announcements, publishing and summary (module docstring).

    Args:
        rules: the rules to run (:mod:`capgeo_callbacks.rules`; default: the study's rule on ``settings``).
        settings: detection settings (default ``DetectionSettings()``).
        run_info: what is known of the run before it starts (task, budget, warm-up, chance...): the summary's
            first fields and the rules' run facts.
        monitor: the accuracy's logged name (the summary's ``monitor``).
        logprob_key: the answer log-prob's tag among the scalars (log-prob emergence; None: none).
        token_acc_key: the per-token accuracy's tag among the scalars (the chance label; None: none).
        rankme_prefix: tag prefix of the RankMe series, ending in ``/``.
        loss_key: the validation loss's tag among the scalars (None: none). The three are recorded, and read by the
            rules, as ``val/logprob``, ``val/token_acc`` and ``val/loss`` whatever the user named them.
        on_alert: called with each :class:`~capgeo_callbacks.detection.Alert` when it is raised.
        live_figures: also publish the story card at the evaluations that change the story: where a rule raises its
            first run alert and where acquisition is confirmed (the full figure, saved beside the summary, and the
            heatmap are drawn at the end, with or without it). A figure is not a series: drawing it at every
            evaluation would cost more than every measure together.
        warn: how problems are reported once (default: a warning on rank zero).
        rules_chosen: whether the user chose the rules: one of those left out for lack of its inputs is a warning;
            one of capgeo's defaults (:func:`~capgeo_callbacks.rules.default_rules`) is a line in the log.
        overhead_budget: capgeo's time at most this share of the run's, ``"measure"`` to time everything and thin
            nothing, or None, 0 or ``"off"`` for no budget (:mod:`capgeo_callbacks.run.budget`). The session owns the
            run's :class:`~capgeo_callbacks.run.budget.OverheadBudget` (``budget``): the adapter hands it to the
            measures; the detector is fixed work in it, the live figures optional; the summary records it under
            ``overhead``, the dashboard shows the share (``capgeo/overhead_share``) and the verdict says it.

    Raises:
        ValueError: on a bad argument.
    """

    def __init__(self, rules: Sequence[Rule] | None = None, settings: DetectionSettings | None = None,
                 run_info: Mapping[str, Any] | None = None, *, monitor: str = VAL_ACC,
                 logprob_key: str | None = LOGPROB, token_acc_key: str | None = TOKEN_ACC,
                 rankme_prefix: str = RANKME, on_alert: Callable[[Alert], Any] | None = None,
                 live_figures: bool = False, warn: WarnOnce | None = None, loss_key: str | None = VAL_LOSS,
                 rules_chosen: bool = True, overhead_budget: float | None = None) -> None:
        keys = RunKeys(monitor, logprob_key, token_acc_key, rankme_prefix, loss_key)  # raises on a bad name
        check_callable("on_alert", on_alert, "alert -> None")
        if not isinstance(live_figures, bool):
            raise ValueError(f"live_figures must be True or False, got {live_figures!r}")
        share = check_overhead_budget(overhead_budget)
        self.warn = warn if warn is not None else WarnOnce("capgeo")
        self.budget = None if share is None else OverheadBudget(share, warn=self.warn)
        if self.budget is not None:
            self.budget.add_work(DETECTOR_WORK, FIXED)
            if live_figures:
                self.budget.add_work(FIGURES_WORK)
        self.tracker = RunTracker(rules, settings, run_info, keys)
        self.on_alert = on_alert
        self.live_figures = live_figures
        self.rules_chosen = rules_chosen
        self.is_zero = True  # side effects (announcing, publishing, files) on rank zero only; detection everywhere
        self.summary: dict[str, Any] = {}  # the latest summary built
        self.layout_published = False
        self._written = False
        self._figures_drawn = False  # the end's figures: drawn once
        self._acquired = False  # whether the story card has been published for acquisition

    # the record, read through
    @property
    def view(self) -> SessionView:
        """The run at its latest evaluation: what a progress bar, a stopper or a tuner reads (built once per
        evaluation)."""
        return self.tracker.latest

    @property
    def keys(self) -> RunKeys:
        return self.tracker.keys

    @property
    def settings(self) -> DetectionSettings:
        return self.tracker.settings

    @property
    def run_info(self) -> dict[str, Any]:
        return self.tracker.run_info

    @property
    def monitor(self) -> str:
        return self.tracker.keys.monitor

    @property
    def rules(self) -> tuple[Rule, ...]:
        """The rules it runs, in order."""
        return tuple(self.tracker.rules)

    @property
    def acc(self) -> list[list[float]]:
        """``[[step, accuracy], ...]`` at every evaluation so far."""
        return self.tracker.acc

    @property
    def scalars(self) -> dict[str, list[list[float]]]:
        """Every other recorded scalar, by tag, as ``[[step, value], ...]``."""
        return self.tracker.scalars

    @property
    def alerts(self) -> list[Alert]:
        """Every rule's alerts so far, in the order raised."""
        return self.tracker.alerts

    @property
    def acquired_step(self) -> int | None:
        return self.view.acquired_step

    def reads(self, tags: Sequence[str]) -> bool:
        """Whether one of the run's rules reads one of the series ``tags`` (the budget thins its measure last)."""
        return any(rule.needs.reads(tag) for rule in self.tracker.rules for tag in tags)

    def add_run_info(self, fields: Mapping[str, Any]) -> None:
        """Add to what the summary records of the run (what it cost, where it ran), before it is written."""
        self.tracker.run_info.update(fields)

    def start(self, publisher: Publisher, rankme_tags: Sequence[str]) -> None:
        """Publish the dashboard's layout once per run (RankMe of ``rankme_tags`` beside accuracy)."""
        if self.is_zero and not self.layout_published:
            self.layout_published = True
            keys = self.keys
            publisher.layout(custom_scalars_layout([t for t in rankme_tags if t.startswith(keys.rankme_prefix)],
                                                   keys.monitor, keys.logprob_key, early_share=EARLY_SHARE,
                                                   loss_tag=keys.loss_key, overhead=self.budget is not None))

    def evaluate(self, step: int, acc: float, scalars: Mapping[str, float] | None = None,
                 measured: Measurements | None = None, publisher: Publisher | None = None, *,
                 max_steps: int | None = None) -> TrackerUpdate:
        """Record one evaluation and run the rules; on rank zero, say once which rules are left out, announce
        each new alert, and publish the forecasts and the dashboard's series at ``step``. With ``live_figures``,
        the story card too where the story changes (:meth:`story_changed`)."""
        if self.budget is not None:
            self.budget.evaluation(step)
        with self.timing(DETECTOR_WORK):  # the rules, announcing and publishing: capgeo's own time
            return self._evaluate(step, acc, scalars, measured, publisher, max_steps)

    def _evaluate(self, step: int, acc: float, scalars: Mapping[str, float] | None, measured: Measurements | None,
                  publisher: Publisher | None, max_steps: int | None) -> TrackerUpdate:
        measured = measured if measured is not None else Measurements()
        publisher = publisher if publisher is not None else Publisher()
        update = self.tracker.update(step, acc, scalars, measured.series)
        for name, missing in update.left_out.items():
            text = f"rule {name!r} is left out of this run: it needs " + "; ".join(
                f"{key_words(key)} ({how_to_record(key)})" for key in missing)
            if self.rules_chosen:
                self.warn(f"needs:{name}", text)
            elif self.is_zero:
                log.info("%s", text)
        if not self.is_zero:
            return update
        for alert in update.alerts:
            self.announce(alert, publisher)
        shown = {f"{FORECAST}{f.rule}": float(f.predicted) for f in update.forecasts if math.isfinite(f.predicted)}
        shown.update({f"{PROBABILITY}{f.rule}": float(f.probability) for f in update.forecasts
                      if f.probability is not None})
        early_end = EARLY_SHARE * max_steps if max_steps and max_steps > 0 else None
        shown.update(dashboard_scalars(by_layer(measured.series, self.keys.rankme_prefix), step, early_end,
                                       sum(alert.kind == "run" for alert in self.alerts)))
        if self.budget is not None and self.budget.measured_share is not None:  # the progress bar's figure
            shown[OVERHEAD_TAG] = self.budget.measured_share
        publisher.scalars(shown, step)
        if self.live_figures and self.story_changed(update) and publisher.shows_images and (
                self.budget is None or self.budget.allows(FIGURES_WORK, step)):
            with self.timing(FIGURES_WORK):
                self.publish_figures(publisher, self.build_summary(measured), step, heatmap=False)
        return update

    def timing(self, work: str) -> AbstractContextManager[Any]:
        """``with session.timing(work):`` charges the block to ``work`` in the overhead budget (nothing without one)."""
        return nullcontext() if self.budget is None else self.budget.timing(work)

    def restore(self, step: int, acc: float, scalars: Mapping[str, float] | None = None,
                measured: Measurements | None = None) -> None:
        """Record one evaluation of a resumed run again, from what the run logged before, announcing nothing (its
        alerts were announced when they were raised)."""
        self.tracker.update(step, acc, scalars, (measured or Measurements()).series)
        self._acquired = self.acquired_step is not None

    def story_changed(self, update: TrackerUpdate) -> bool:
        """Whether the evaluation ``update`` reports is a point of the run's story: a rule's first run alert, or
        the evaluation at which acquisition is confirmed."""
        before = self.alerts[: len(self.alerts) - len(update.alerts)]
        warned = {alert.rule for alert in before if alert.kind == "run"}
        first_warning = any(alert.kind == "run" and alert.rule not in warned for alert in update.alerts)
        acquired = not self._acquired and self.acquired_step is not None
        self._acquired = self._acquired or acquired
        return first_warning or acquired

    def announce(self, alert: Alert, publisher: Publisher) -> None:
        """An alert, once: a ``logging`` warning, the publisher's alert, and ``on_alert``."""
        message = alert.message(self.monitor)
        log.warning(message)
        publisher.alert("capgeo precursor alert", message, alert.step)
        if self.on_alert is not None:
            try:
                self.on_alert(alert)
            except Exception as error:  # noqa: BLE001 - the user's hook must not stop training either
                self.warn("on_alert", f"on_alert raised {type(error).__name__}: {error}; training goes on")

    def build_summary(self, measured: Measurements | None = None, steps: int | None = None) -> dict[str, Any]:
        """The run summary from the record and ``measured`` (also kept as ``self.summary``)."""
        measured = measured if measured is not None else Measurements()
        self.summary = self.tracker.summary(measured.series, steps=steps, parameters=measured.parameters,
                                            rows=measured.rows, selectors=measured.selectors,
                                            left_out=measured.left_out)
        if self.budget is not None:
            self.summary["overhead"] = self.budget.record()
        return self.summary

    def finish(self, measured: Measurements | None = None, steps: int | None = None,
               publisher: Publisher | None = None, directory: str | Path | None = None,
               filename: str = SUMMARY_FILENAME, extra: Mapping[str, Any] | None = None,
               figures: bool = True) -> dict[str, Any]:
        """The run's end: the summary (with ``extra`` keys after its own), written once into ``directory`` (None:
        not written), and on the publisher the verdict, hparams and (with ``figures``, where the publisher shows
        images, once) the story card and the RankMe heatmap. The full story figure is drawn after training, on
        demand (``python -m capgeo_callbacks.offline.story RUN_DIR``)."""
        summary = {**self.build_summary(measured, steps), **(extra or {})}
        self.summary = summary
        if not self.is_zero:
            return summary
        publisher = publisher if publisher is not None else Publisher()
        step = int(summary["steps"])
        if figures and not self._figures_drawn:
            with self.timing(FIGURES_WORK):  # a fixed cost of the run: in the budget's record written below
                self.publish_figures(publisher, summary, step)
            self._figures_drawn = True
            if self.budget is not None:
                summary["overhead"] = self.budget.record()
        if directory is not None and not self._written:
            write_summary(summary, directory, filename)
            self._written = True
        cost = overhead_line(summary)
        publisher.text("capgeo/verdict", verdict_table(summary, markdown=True) + (f"\n\n{cost}" if cost else ""), step)
        metrics = {"capgeo/acquisition_step": summary.get("acquisition_step"), "capgeo/gap": summary.get("gap"),
                   "capgeo/layer_order_rho": summary.get("layer_order_rho"),
                   "capgeo/final_acc": self.acc[-1][1] if self.acc else None}
        params = {k: v for k, v in self.run_info.items() if isinstance(v, (int, float, str, bool))}
        params["verdict"] = str(summary.get("verdict", ""))
        publisher.hparams(params, {k: math.nan if v is None else float(v) for k, v in metrics.items()})
        return summary

    def publish_figures(self, publisher: Publisher, summary: Mapping[str, Any], step: int,
                        heatmap: bool = True) -> None:
        """The story card and the heatmap, drawn only if the publisher shows images (a figure costs more than a
        measure: drawn for nobody, it would be the run's largest fixed cost)."""
        if not publisher.shows_images:
            return
        publisher.image("capgeo/story", figure_pixels(story_card(summary)), step)
        if heatmap:
            collapse = {name: info["collapse_step"] for name, info in summary["layers"].items()}
            image = rankme_heatmap(by_layer(summary["series"], self.keys.rankme_prefix),
                                   summary["acquisition_step"], collapse)
            publisher.image("capgeo/rankme_heatmap", image, step)

    def state_dict(self) -> dict[str, Any]:
        """The record, and how to rebuild this session (rules, settings, run info, keys): what a checkpoint keeps
        and offline analysis reads back (:meth:`from_state`)."""
        tracker = self.tracker
        return {"record": tracker.state_dict(), "rules": [rule_record(rule) for rule in tracker.rules],
                "settings": tracker.settings.to_dict(), "run_info": plain(tracker.run_info),
                "keys": asdict(tracker.keys),
                "layout_published": self.layout_published,
                **({} if self.budget is None else {"overhead": self.budget.state_dict()})}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the record (the configuration is the one this session was built with), from this layout or an
        earlier one (:func:`~capgeo_callbacks.run.tracker.record_of`)."""
        self.tracker.load_state_dict(record_of(state, self.keys.logprob_key))
        self._acquired = self.acquired_step is not None
        self.layout_published = bool(state.get("layout_published", state.get("layout_written", False)))
        if self.budget is not None and state.get("overhead"):
            self.budget.load_state_dict(state["overhead"])

    @classmethod
    def from_state(cls, state: Mapping[str, Any], **options: Any) -> RunSession:
        """A session configured as the one whose :meth:`state_dict` is ``state``, with an empty record."""
        keys = dict(state.get("keys") or {})
        return cls([rule_from_record(record) for record in state.get("rules", [])],
                   DetectionSettings.from_dict(state.get("settings") or {}), state.get("run_info") or {},
                   **{**keys, **options})


def plain(value: Any) -> Any:
    """``value`` as plain JSON types (what a checkpoint loaded with ``weights_only`` can hold)."""
    return json.loads(json.dumps(json_safe(value), default=str))
