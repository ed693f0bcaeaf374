r"""Precursor detector
==================

Follows accuracy and the per-layer RankMe series live, raises an alert when a layer's RankMe has collapsed
and recovered while the run has not yet acquired the capability, and writes the run summary.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from capgeo_callbacks.callbacks.base import MeasureCallback, check_positive_int, never_fails
from capgeo_callbacks.detection import Alert, DetectionSettings
from capgeo_callbacks.publish.dashboard import custom_scalars_layout, dashboard_scalars
from capgeo_callbacks.publish.figures import figure_pixels, rankme_heatmap, story_card, story_figure
from capgeo_callbacks.publish.loggers import publish_alert, publish_hparams, publish_image, publish_text, save_png
from capgeo_callbacks.rules import Rule
from capgeo_callbacks.run.summary import SUMMARY_FILENAME, alert_message, verdict_table, write_summary
from capgeo_callbacks.run.tracker import RunTracker

log = logging.getLogger("capgeo")
STORY_FILENAME = "capgeo_story.png"
EARLY_SHARE = 0.1  # the dashboard's early charts: the first tenth of the budget, where the schedule is dense


class PrecursorDetector(Callback):
    r"""Detect a RankMe collapse-and-recovery that precedes acquisition, live and at the end of a run.

    At every validation it records the monitored accuracy (like ``EarlyStopping``'s ``monitor``) and the
    log-prob, reads the RankMe series the :class:`~capgeo_callbacks.RankMeMonitor` owns, and raises the
    alerts :func:`~capgeo_callbacks.detection.scan_alerts` finds (docs/design.md, "Detection"). Each alert
    is raised once: a text entry ``capgeo/alerts`` in every logger (a W&B alert too), a ``logging`` warning
    on the ``capgeo`` logger, and ``on_alert(alert)`` if given. At the end of fitting it writes
    ``capgeo_summary.json`` (:func:`~capgeo_callbacks.run.summary.build_summary`) to the run's log folder, the
    verdict as text (``capgeo/verdict``), the RankMe heatmap (``capgeo/rankme_heatmap``) and hparams with
    the headline figures. Side effects happen on rank zero only; detection runs on every rank on identical
    (synchronised) values.

    Args:
        monitor: accuracy key in ``trainer.callback_metrics``.
        logprob_monitor: log-prob key for log-prob emergence (``None`` to skip).
        rankme_prefix: tag prefix of the RankMe series, ending in ``/``.
        settings: detection settings (default :class:`~capgeo_callbacks.DetectionSettings()`).
        on_alert: called with each :class:`~capgeo_callbacks.detection.Alert` when it is raised.
        run_info: fields stored at the top of the summary (task, difficulty, model size, ...).
        figure_every_n_evals: also refresh the story figure every n evaluations (0: only at the end), as long as
            drawing it has cost at most ``figure_budget`` of the time since the last one.
        figure_budget: the largest share of the training time the live figure may take, in (0, 1].
        record: prefixes of the logged scalars recorded at every evaluation into the summary's series (beside
            the monitored accuracy), so any rule can be re-scored from the summary alone.
        token_acc_monitor: per-token accuracy key, for the chance label (``None`` to skip).
        rules: the rules run live (:mod:`capgeo_callbacks.rules`; default: the study's rule on ``settings``).
            Their alerts are announced; forecasters' predictions are logged as ``forecast/<rule>``.

    Raises:
        ValueError: on a bad argument.

    Recorded at every evaluation (the summary's ``series``): ``acc`` (the monitored accuracy), every scalar
    under a prefix of ``record``, ``train/loss`` (the mean of the training losses since the previous
    evaluation, as ``training_step`` returned them) and ``lr`` (the first optimizer's first learning rate).

    Logged keys:
        text ``capgeo/alerts`` and ``capgeo/verdict``; image ``capgeo/rankme_heatmap``; hparams metrics
        ``capgeo/acquisition_step``, ``capgeo/gap``, ``capgeo/layer_order_rho``, ``capgeo/final_acc``.

    Example::

        detector = PrecursorDetector(monitor="val/acc", on_alert=lambda alert: print(alert))
        trainer = Trainer(callbacks=[RankMeMonitor(), detector])
    """

    def __init__(
        self,
        monitor: str = "val/acc",
        logprob_monitor: str | None = "val/logprob",
        rankme_prefix: str = "rankme/",
        settings: DetectionSettings | None = None,
        on_alert: Callable[[Alert], Any] | None = None,
        run_info: Mapping[str, Any] | None = None,
        figure_every_n_evals: int = 32,
        figure_budget: float = 0.01,
        record: Sequence[str] = ("val/",),
        token_acc_monitor: str | None = "val/token_acc",
        rules: Sequence[Rule] | None = None,
    ) -> None:
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(f"monitor must be a metric key (a non-empty string), got {monitor!r}")
        if logprob_monitor is not None and (not isinstance(logprob_monitor, str) or not logprob_monitor):
            raise ValueError(f"logprob_monitor must be a metric key or None, got {logprob_monitor!r}")
        if not isinstance(rankme_prefix, str) or not rankme_prefix.endswith("/") or len(rankme_prefix) < 2:
            raise ValueError(f"rankme_prefix must be a tag prefix ending in '/', got {rankme_prefix!r}")
        if settings is not None and not isinstance(settings, DetectionSettings):
            raise ValueError(f"settings must be a DetectionSettings, got {type(settings).__name__}")
        if on_alert is not None and not callable(on_alert):
            raise ValueError(f"on_alert must be callable alert -> None, got {on_alert!r}")
        if run_info is not None and not isinstance(run_info, Mapping):
            raise ValueError(f"run_info must be a mapping of summary fields, got {type(run_info).__name__}")
        if isinstance(record, str) or not all(isinstance(prefix, str) and prefix for prefix in record):
            raise ValueError(f"record must be a sequence of non-empty tag prefixes (e.g. ('val/',)), got {record!r}")
        if token_acc_monitor is not None and (not isinstance(token_acc_monitor, str) or not token_acc_monitor):
            raise ValueError(f"token_acc_monitor must be a metric key or None, got {token_acc_monitor!r}")
        check_positive_int("figure_every_n_evals", figure_every_n_evals, 0)
        if isinstance(figure_budget, bool) or not isinstance(figure_budget, (int, float)) or not 0 < figure_budget <= 1:
            raise ValueError(f"figure_budget must be a share of the training time in (0, 1], got {figure_budget!r}")
        self.monitor = monitor
        self.logprob_monitor = logprob_monitor
        self.rankme_prefix = rankme_prefix
        self.settings = settings if settings is not None else DetectionSettings()
        self.on_alert = on_alert
        self.run_info = dict(run_info or {})
        self.figure_every_n_evals = figure_every_n_evals
        self.figure_budget = float(figure_budget)
        self._figure_cost = 0.0  # seconds the last live figure took
        self._figure_time = time.perf_counter()  # when it was drawn
        self.record = tuple(record)
        self.token_acc_monitor = token_acc_monitor
        # the one owner of the run's record, rules, alerts and forecasts (measure callbacks own their series)
        self.tracker = RunTracker(rules, self.settings, self.run_info, monitor, logprob_monitor, token_acc_monitor,
                                  rankme_prefix)
        self._loss_sum: float = 0.0  # training losses since the previous evaluation
        self._loss_count = 0
        self._loss_pending: list[Any] = []  # this interval's losses, still tensors (no device sync per step)
        self.summary: dict[str, Any] = {}
        self._layout_written = False
        self._warned: set[str] = set()

    @property
    def state_key(self) -> str:
        return self._generate_state_key(monitor=self.monitor, rankme_prefix=self.rankme_prefix)

    @property
    def acquired_step(self) -> int | None:
        """The acquisition step, once confirmed; None before."""
        return self.tracker.acquired_step

    @property
    def acc(self) -> list[list[float]]:
        """``[[step, accuracy], ...]`` at every evaluation so far."""
        return self.tracker.acc

    @property
    def scalars(self) -> dict[str, list[list[float]]]:
        """Every other recorded scalar, by tag."""
        return self.tracker.scalars

    @property
    def alerts(self) -> list[Alert]:
        """The alerts raised so far, every rule's."""
        return self.tracker.alerts

    @property
    def logprob(self) -> list[list[float]]:
        """The recorded log-prob series (``logprob_monitor``), ``[]`` if none."""
        return self.scalars.get(self.logprob_monitor, []) if self.logprob_monitor else []

    def warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            rank_zero_warn(f"PrecursorDetector: {message}")

    def measured_series(self, trainer: pl.Trainer) -> dict[str, list[list[float]]]:
        """Every series the measure callbacks own, by tag (RankMe layers in depth order)."""
        series: dict[str, list[list[float]]] = {}
        for callback in trainer.callbacks:
            if isinstance(callback, MeasureCallback):
                ordered = [tag for tag in callback.tags if tag in callback.series]
                ordered += [tag for tag in callback.series if tag not in ordered]
                series.update({tag: callback.series[tag] for tag in ordered})
        return series

    def rankme_series(self, trainer: pl.Trainer) -> dict[str, list[list[float]]]:
        """Per layer, the RankMe series (tags under ``rankme_prefix``, prefix removed)."""
        return {tag[len(self.rankme_prefix):]: points for tag, points in self.measured_series(trainer).items()
                if tag.startswith(self.rankme_prefix)}

    @override
    @never_fails
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._layout_written or not trainer.is_global_zero:
            return
        self._layout_written = True
        tags = [tag for cb in trainer.callbacks if isinstance(cb, MeasureCallback) for tag in cb.tags]
        layout = custom_scalars_layout([t for t in tags if t.startswith(self.rankme_prefix)], self.monitor,
                                       self.logprob_monitor, early_share=EARLY_SHARE)
        from lightning.pytorch.loggers import TensorBoardLogger

        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.experiment.add_custom_scalars(layout)

    @override
    @never_fails
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            self._loss_pending.append(loss.detach())
            if len(self._loss_pending) >= 64:  # bounded memory; one sync per 64 steps at most
                self._flush_losses()

    def _flush_losses(self) -> None:
        if self._loss_pending:
            # float64: the sum of float32 losses is then exact, so a run resumed mid-interval adds up the same
            values = torch.stack([value.double().reshape(()) for value in self._loss_pending])
            finite = values[torch.isfinite(values)]
            self._loss_sum += float(finite.sum())
            self._loss_count += int(finite.numel())
            self._loss_pending = []

    def _scalars_now(self, trainer: pl.Trainer) -> dict[str, float]:
        """Every scalar under ``record`` (not the monitor), the mean training loss since the last evaluation and
        the learning rate, at this evaluation."""
        scalars = {tag: float(value) for tag, value in trainer.callback_metrics.items()
                   if tag != self.monitor and tag.startswith(self.record)}
        self._flush_losses()
        if self._loss_count:
            scalars["train/loss"] = self._loss_sum / self._loss_count
        self._loss_sum, self._loss_count = 0.0, 0
        if trainer.optimizers and trainer.optimizers[0].param_groups:
            scalars["lr"] = float(trainer.optimizers[0].param_groups[0]["lr"])
        return scalars

    @override
    @never_fails
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            self.warn_once("monitor", f"monitored metric {self.monitor!r} was not logged; available: "
                           f"{', '.join(sorted(metrics)) or 'none'}")
            return
        step = trainer.global_step
        update = self.tracker.update(step, float(metrics[self.monitor]), self._scalars_now(trainer),
                                     self.measured_series(trainer))
        for alert in update.alerts:
            self._announce(trainer, alert)
        shown = {f"forecast/{f.rule}": float(f.predicted) for f in update.forecasts
                 if f.predicted is not None and math.isfinite(f.predicted)}
        early_end = EARLY_SHARE * trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        shown.update(dashboard_scalars(self.rankme_series(trainer), step, early_end,
                                       sum(alert.kind == "run" for alert in self.alerts)))
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(shown, step=step)
        if self.figure_every_n_evals and len(self.acc) % self.figure_every_n_evals == 0:
            log_dir = trainer.log_dir  # a collective: every rank asks
            elapsed = time.perf_counter() - self._figure_time
            if self._figure_cost <= self.figure_budget * elapsed:  # the live figure never costs > the budget
                started = time.perf_counter()
                self._publish_figures(trainer, pl_module, step, log_dir, heatmap=False)
                self._figure_time = time.perf_counter()
                self._figure_cost = self._figure_time - started

    def _announce(self, trainer: pl.Trainer, alert: Alert) -> None:
        if not trainer.is_global_zero:
            return
        message = alert_message(alert, self.monitor)
        log.warning(message)
        publish_alert(trainer, "capgeo precursor alert", message, alert.step, warn=self.warn_once)
        if self.on_alert is not None:
            try:
                self.on_alert(alert)
            except Exception as error:  # noqa: BLE001 - the user's hook must not stop training either
                self.warn_once("on_alert", f"on_alert raised {type(error).__name__}: {error}; training goes on")

    def _publish_figures(self, trainer: pl.Trainer, pl_module: pl.LightningModule, step: int,
                         log_dir: str | None, heatmap: bool = True) -> None:
        """The story figure and the heatmap, to every logger and as PNG in ``log_dir`` (rank zero; ``log_dir``
        comes from ``trainer.log_dir``, a collective that every rank must call)."""
        if not trainer.is_global_zero:
            return
        summary = self.summary if step == trainer.global_step and self.summary else self.build_summary(trainer,
                                                                                                       pl_module)
        # loggers show images as small cards: the card-sized story there, the full one in the run folder
        publish_image(trainer, "capgeo/story", figure_pixels(story_card(summary)), step, warn=self.warn_once)
        story = figure_pixels(story_figure(summary))
        if heatmap:
            collapse = {name: info["collapse_step"] for name, info in summary["layers"].items()}
            image = rankme_heatmap(self.rankme_series(trainer), summary["acquisition_step"], collapse)
            publish_image(trainer, "capgeo/rankme_heatmap", image, step, warn=self.warn_once)
        if log_dir is not None:
            save_png(story, Path(log_dir) / STORY_FILENAME)

    def build_summary(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        """The run summary (also stored as ``self.summary``)."""
        callbacks = [cb for cb in trainer.callbacks if isinstance(cb, MeasureCallback)]
        self.summary = self.tracker.summary(
            self.measured_series(trainer), steps=trainer.global_step,
            parameters=sum(p.numel() for p in pl_module.parameters()),
            rows={tag: n for cb in callbacks for tag, n in cb.rows.items()},
            selectors={cb.prefix: cb.selector_name for cb in callbacks if cb.selector_name},
        )
        return self.summary

    @override
    @never_fails
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        summary = self.build_summary(trainer, pl_module)
        log_dir = trainer.log_dir  # a collective under DDP: every rank must ask
        if not trainer.is_global_zero:
            return
        if log_dir is not None:
            write_summary(summary, log_dir, SUMMARY_FILENAME)
        self._publish_figures(trainer, pl_module, trainer.global_step, log_dir)
        publish_text(trainer, "capgeo/verdict", verdict_table(summary, markdown=True), trainer.global_step,
                     warn=self.warn_once)
        metrics = {"capgeo/acquisition_step": summary.get("acquisition_step"), "capgeo/gap": summary.get("gap"),
                   "capgeo/layer_order_rho": summary.get("layer_order_rho"),
                   "capgeo/final_acc": self.acc[-1][1] if self.acc else None}
        params = {k: v for k, v in self.run_info.items() if isinstance(v, (int, float, str, bool))}
        params["verdict"] = str(summary.get("verdict", ""))
        publish_hparams(trainer, params, {k: math.nan if v is None else float(v) for k, v in metrics.items()},
                        warn=self.warn_once)

    @override
    def state_dict(self) -> dict[str, Any]:
        self._flush_losses()
        return {"record": self.tracker.state_dict(), "loss_since_evaluation": [self._loss_sum, self._loss_count],
                "layout_written": self._layout_written}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "record" in state_dict:
            self.tracker.load_state_dict(state_dict["record"])
        else:  # capgeo 0.1 ("tracker": steps and acc) and 0.2 (acc, logprob or scalars, alerts at the top)
            legacy = state_dict.get("tracker", {})
            pairs = zip(legacy.get("steps", []), legacy.get("acc", []), strict=True)
            acc = [[s, a] for s, a in pairs if a is not None] if "tracker" in state_dict else state_dict.get("acc", [])
            scalars = dict(state_dict.get("scalars", {}))
            logprob = state_dict.get("logprob_series", state_dict.get("logprob", []))
            if logprob and self.logprob_monitor and self.logprob_monitor not in scalars:
                scalars[self.logprob_monitor] = logprob
            alerts = [{**alert, "rule": alert.get("rule", "study")} for alert in state_dict.get("alerts", [])]
            self.tracker.load_state_dict({"acc": acc, "scalars": scalars, "alerts": alerts})
        self._loss_sum, self._loss_count = state_dict.get("loss_since_evaluation", [0.0, 0])
        self._loss_pending = []
        self._layout_written = bool(state_dict.get("layout_written", False))
