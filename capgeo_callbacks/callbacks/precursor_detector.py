r"""Precursor detector
==================

Follows accuracy and the per-layer RankMe series live, raises an alert when a layer's RankMe has
collapsed and recovered while the run has not yet acquired the capability, and writes the verdict.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from capgeo_callbacks.callbacks.base import MeasureCallback, append_point
from capgeo_callbacks.dashboard import custom_scalars_layout, rankme_heatmap, tensorboard_writers
from capgeo_callbacks.detection import (
    Alert,
    PrecursorTracker,
    detect_logprob_emergence,
    layer_order,
    measure_transition,
)

log = logging.getLogger("capgeo")

# How each measure's own transition is found (spec §7; the study's "precursor rate" per measure).
# A key ending in "/" is a tag prefix.
MEASURE_TRANSITIONS: dict[str, str] = {
    "rankme/": "collapse",
    "grad_erank": "collapse",
    "grad_cov_rank": "collapse",
    "hessian/eig_0": "change",
    "hessian/trace": "change",
    "llc": "change",
    "probe_acc/": "crossing",
}


def transition_kind(tag: str, kinds: Mapping[str, str]) -> str | None:
    """The transition kind of ``tag``: an exact key of ``kinds``, else the longest matching prefix key."""
    if tag in kinds:
        return kinds[tag]
    prefixes = [key for key in kinds if key.endswith("/") and tag.startswith(key)]
    return kinds[max(prefixes, key=len)] if prefixes else None


class PrecursorDetector(Callback):
    r"""Detect a RankMe collapse-and-recovery that precedes acquisition, live and at the end of a run.

    At every validation it reads the monitored accuracy (like ``EarlyStopping``'s ``monitor``) and the
    values the measure callbacks logged at this step (``rankme/<layer>`` from
    :class:`~capgeo_callbacks.RankMeMonitor`), and feeds them to a
    :class:`~capgeo_callbacks.detection.PrecursorTracker` (spec §7). Each alert is raised once: a
    TensorBoard text entry under ``capgeo/alerts``, a ``logging`` warning on the ``capgeo`` logger, and
    ``on_alert(alert)`` if given. At the end of fitting it writes ``capgeo_summary.json`` to the run's
    log folder, the verdict as TensorBoard text (``capgeo/verdict``), the RankMe heatmap image
    (``capgeo/rankme_heatmap``) and hparams with the headline figures. Side effects happen on rank
    zero only; the detection itself runs on every rank on identical (synchronised) values.

    Args:
        monitor: accuracy key in ``trainer.callback_metrics``.
        logprob_monitor: log-prob key for log-prob emergence (``None`` to skip).
        rankme_prefix: tag prefix of the RankMe series.
        threshold: accuracy threshold of acquisition.
        patience: consecutive evaluations at or above ``threshold`` for acquisition.
        window: evaluations within which collapse and acquisition count as simultaneous.
        min_drop: least peak-to-trough drop, as a fraction of the peak, for a collapse.
        recovery_fraction: rise from the trough, as a fraction of the drop, that confirms recovery.
        recovery_evals: consecutive evaluations the rise must hold.
        smoothing: centred moving-average width applied to RankMe before detection.
        logprob_threshold: log-prob emergence threshold.
        on_alert: called with each :class:`~capgeo_callbacks.detection.Alert` when it is raised.
        run_info: extra fields for the summary (task, difficulty, model size, ...).
        summary_filename: name of the summary file in the log folder.
        heatmap_every_n_evals: also refresh the heatmap image every n evaluations (0: only at the end).
        measure_transitions: how each measure's transition is found for the per-measure precursor
            report (tag or tag prefix -> ``collapse``, ``crossing`` or ``change``); default
            :data:`MEASURE_TRANSITIONS`.

    Logged keys:
        text ``capgeo/alerts`` and ``capgeo/verdict``;
        image ``capgeo/rankme_heatmap``; hparams metrics ``capgeo/acquisition_step``,
        ``capgeo/gap``, ``capgeo/layer_order_rho``, ``capgeo/final_acc``.

    Example::

        detector = PrecursorDetector(monitor="val/acc", on_alert=lambda alert: print(alert))
        trainer = Trainer(callbacks=[RankMeMonitor(), detector])
    """

    def __init__(
        self,
        monitor: str = "val/acc",
        logprob_monitor: str | None = "val/logprob",
        rankme_prefix: str = "rankme/",
        threshold: float = 0.5,
        patience: int = 3,
        window: int = 3,
        min_drop: float = 0.25,
        recovery_fraction: float = 0.10,
        recovery_evals: int = 2,
        smoothing: int = 3,
        logprob_threshold: float = math.log(0.5),
        on_alert: Callable[[Alert], Any] | None = None,
        run_info: Mapping[str, Any] | None = None,
        summary_filename: str = "capgeo_summary.json",
        heatmap_every_n_evals: int = 32,
        measure_transitions: Mapping[str, str] | None = None,
    ) -> None:
        self.tracker = PrecursorTracker(
            threshold=threshold, patience=patience, window=window, min_drop=min_drop,
            recovery_fraction=recovery_fraction, recovery_evals=recovery_evals, smoothing=smoothing,
        )
        if heatmap_every_n_evals < 0:
            raise ValueError(f"heatmap_every_n_evals must be >= 0, got {heatmap_every_n_evals}")
        self.monitor = monitor
        self.logprob_monitor = logprob_monitor
        self.rankme_prefix = rankme_prefix
        self.logprob_threshold = logprob_threshold
        self.on_alert = on_alert
        self.run_info = dict(run_info or {})
        self.summary_filename = summary_filename
        self.heatmap_every_n_evals = heatmap_every_n_evals
        self.measure_transitions = dict(MEASURE_TRANSITIONS if measure_transitions is None else measure_transitions)
        self.logprob_series: list[list[float]] = []
        self.measure_series: dict[str, list[list[float]]] = {}
        self.alerts: list[dict[str, Any]] = []
        self.summary: dict[str, Any] = {}
        self._warned_missing = False
        self._layout_written = False

    @property
    def state_key(self) -> str:
        return self._generate_state_key(monitor=self.monitor, rankme_prefix=self.rankme_prefix)

    def _measure_callbacks(self, trainer: pl.Trainer) -> list[MeasureCallback]:
        return [cb for cb in trainer.callbacks if isinstance(cb, MeasureCallback)]

    def _rankme_tags(self, trainer: pl.Trainer) -> list[str]:
        tags: list[str] = []
        for callback in self._measure_callbacks(trainer):
            tags += [t for t in getattr(callback, "tags", []) if t.startswith(self.rankme_prefix)]
        return tags

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._layout_written:
            return
        self._layout_written = True
        layout = custom_scalars_layout(self._rankme_tags(trainer), self.monitor, self.logprob_monitor)
        for writer in tensorboard_writers(trainer):
            writer.add_custom_scalars(layout)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            if not self._warned_missing:
                self._warned_missing = True
                rank_zero_warn(f"PrecursorDetector: monitored metric {self.monitor!r} was not logged; "
                               f"available: {', '.join(sorted(metrics)) or 'none'}")
            return
        step = trainer.global_step
        acc = float(metrics[self.monitor])
        if self.logprob_monitor and self.logprob_monitor in metrics:
            append_point(self.logprob_series, step, float(metrics[self.logprob_monitor]))
        rankme: dict[str, float] = {}
        for callback in self._measure_callbacks(trainer):
            for tag, value in callback.values_at(step).items():
                if tag.startswith(self.rankme_prefix):
                    rankme[tag[len(self.rankme_prefix):]] = value
                else:
                    append_point(self.measure_series.setdefault(tag, []), step, value)
        for alert in self.tracker.update(step, acc, rankme):
            self._raise(trainer, alert)
        evaluations = len(self.tracker.steps)
        if self.heatmap_every_n_evals and evaluations % self.heatmap_every_n_evals == 0:
            self._write_heatmap(trainer, step)

    def _raise(self, trainer: pl.Trainer, alert: Alert) -> None:
        where = "the run" if alert.kind == "run" else f"layer {alert.layer}"
        message = (f"capgeo precursor alert at step {alert.step}: RankMe of {where} collapsed at step "
                   f"{alert.collapse_step} (floor {alert.floor:.2f}) and recovered by step "
                   f"{alert.recovery_step}, while {self.monitor} is still below the acquisition threshold")
        self.alerts.append({"message": message, **_as_dict(alert)})
        if not trainer.is_global_zero:
            return
        log.warning(message)
        for writer in tensorboard_writers(trainer):
            writer.add_text("capgeo/alerts", message, global_step=alert.step)
        if self.on_alert is not None:
            self.on_alert(alert)

    def _write_heatmap(self, trainer: pl.Trainer, step: int) -> None:
        writers = list(tensorboard_writers(trainer))
        if not writers:
            return
        summary = self.tracker.summary()
        collapse = {name: info.get("collapse_step") for name, info in summary.get("layers", {}).items()}
        image = rankme_heatmap(self.tracker.rankme_series(), self.tracker.acquired_step, collapse)
        for writer in writers:
            writer.add_image("capgeo/rankme_heatmap", image, global_step=step, dataformats="HWC")

    def build_summary(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        """The run summary of spec §8 (also stored as ``self.summary``)."""
        tracked = self.tracker.summary()
        layers = tracked.get("layers", {})
        depths = {name: depth for depth, name in enumerate(layers)}
        rho = layer_order({name: info.get("collapse_step") for name, info in layers.items()}, depths)
        emergence = None
        if self.logprob_series:
            acc_at = dict(zip(self.tracker.steps, self.tracker.acc, strict=True))
            steps = [int(p[0]) for p in self.logprob_series]
            emergence = detect_logprob_emergence(
                steps, [p[1] for p in self.logprob_series], [acc_at.get(s, math.nan) for s in steps],
                threshold=self.logprob_threshold,
            )
        measures = self._measure_transitions(tracked)
        rows = {}
        for callback in self._measure_callbacks(trainer):
            rows.update(getattr(callback, "rows_used", {}))
        summary = {
            **self.run_info,
            "parameters": self.run_info.get("parameters", sum(p.numel() for p in pl_module.parameters())),
            "steps": trainer.global_step,
            "monitor": self.monitor,
            "rankme_rows": rows,
            **tracked,
            "logprob_emergence_step": None if emergence is None else emergence.step,
            "acc_at_logprob_emergence": None if emergence is None else emergence.acc_at_step,
            "layer_order_rho": rho,
            "measures": measures,
            "alerts": self.alerts,
            "series": {
                **tracked.get("series", {}),
                **({self.logprob_monitor: self.logprob_series} if self.logprob_monitor else {}),
                **self.measure_series,
            },
        }
        self.summary = summary
        return summary

    def _measure_transitions(self, tracked: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """For each measured series: its transition step and whether it came before acquisition."""
        series = {**tracked.get("series", {}), **self.measure_series}
        acquisition = tracked.get("acquisition_step")
        settings = tracked.get("settings", {})
        collapse_kwargs = {k: settings[k] for k in ("min_drop", "recovery_fraction", "recovery_evals", "smoothing")
                           if k in settings}
        result: dict[str, dict[str, Any]] = {}
        for tag, points in series.items():
            kind = transition_kind(tag, self.measure_transitions)
            if kind is None or len(points) < 2:
                continue
            transition = measure_transition(
                [int(p[0]) for p in points], [p[1] for p in points], acquisition, kind,
                threshold=self.tracker.settings.get("threshold", 0.5), window=int(settings.get("window", 3)),
                reference_steps=self.tracker.steps, **(collapse_kwargs if kind == "collapse" else {}),
            )
            result[tag] = {"kind": transition.kind, "transition_step": transition.step,
                           "precedes_acquisition": transition.precedes_acquisition}
        return result

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        summary = self.build_summary(trainer, pl_module)
        log_dir = trainer.log_dir  # a collective under DDP: every rank must ask
        if not trainer.is_global_zero:
            return
        if log_dir is not None:
            path = Path(log_dir) / self.summary_filename
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(summary, indent=1, default=_json_default))
        self._write_heatmap(trainer, trainer.global_step)
        for writer in tensorboard_writers(trainer):
            writer.add_text("capgeo/verdict", verdict_markdown(summary), global_step=trainer.global_step)
        hparam_metrics = {
            "capgeo/acquisition_step": _number(summary.get("acquisition_step")),
            "capgeo/gap": _number(summary.get("gap")),
            "capgeo/layer_order_rho": _number(summary.get("layer_order_rho")),
            "capgeo/final_acc": _number(self.tracker.acc[-1] if self.tracker.acc else None),
        }
        params = {k: v for k, v in self.run_info.items() if isinstance(v, (int, float, str, bool))}
        params["verdict"] = summary.get("verdict", "")
        for logger in trainer.loggers:
            logger.log_hyperparams(params, metrics=hparam_metrics)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"tracker": self.tracker.state_dict(), "logprob_series": self.logprob_series,
                "measure_series": self.measure_series, "alerts": self.alerts,
                "layout_written": self._layout_written}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "tracker" in state_dict:
            self.tracker.load_state_dict(state_dict["tracker"])
        self.logprob_series = [list(p) for p in state_dict.get("logprob_series", [])]
        self.measure_series = {k: [list(p) for p in v] for k, v in state_dict.get("measure_series", {}).items()}
        self.alerts = list(state_dict.get("alerts", []))
        self._layout_written = bool(state_dict.get("layout_written", False))


def verdict_markdown(summary: Mapping[str, Any]) -> str:
    """The verdict and per-layer table as Markdown (TensorBoard text renders it)."""
    lines = [
        f"**verdict: {summary.get('verdict')}**, gap {summary.get('gap')} steps; acquisition step "
        f"{summary.get('acquisition_step')}; log-prob emergence step {summary.get('logprob_emergence_step')}; "
        f"layer-order rho {_fmt(summary.get('layer_order_rho'))}",
        "",
        "| layer | collapse step | floor | recovery step | verdict | gap |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, info in summary.get("layers", {}).items():
        lines.append(f"| {name} | {info.get('collapse_step')} | {_fmt(info.get('floor'))} | "
                     f"{info.get('recovery_step')} | {info.get('verdict')} | {info.get('gap')} |")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _as_dict(alert: Alert) -> dict[str, Any]:
    from dataclasses import asdict, is_dataclass

    return asdict(alert) if is_dataclass(alert) else dict(vars(alert))


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(value)
    raise TypeError(f"cannot serialise {type(value).__name__}")
