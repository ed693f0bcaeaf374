r"""Precursor detector
==================

The Lightning adapter of the run session: at every validation it feeds the session the monitored accuracy, the
logged scalars and the series the measure callbacks own; at the end of fitting the session writes the summary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from capgeo_callbacks.callbacks.base import MeasureCallback, budget_measures, measurements_of
from capgeo_callbacks.detection import Alert, DetectionSettings
from capgeo_callbacks.keys import LOGPROB, LR, RANKME, TOKEN_ACC, TRAIN_LOSS, VAL_ACC, VAL_LOSS
from capgeo_callbacks.publish.loggers import TrainerPublisher
from capgeo_callbacks.rules import Rule, default_rules
from capgeo_callbacks.run.budget import DEFAULT_OVERHEAD_BUDGET, OverheadSetting, steps_of
from capgeo_callbacks.run.failures import WarnOnce, never_fails
from capgeo_callbacks.run.session import RunSession


class PrecursorDetector(Callback):
    r"""Run capgeo's rules on a Lightning run as it trains, announce their alerts and write the run's summary.

    At every validation it records the monitored accuracy (like ``EarlyStopping``'s ``monitor``) and every logged
    scalar under ``record``, with the mean training loss since the previous evaluation and the learning rate, and
    hands them to its :class:`~capgeo_callbacks.run.session.RunSession` with the series of the measure callbacks
    (:class:`~capgeo_callbacks.RankMeMonitor`, ...). The session runs the rules (default:
    :func:`~capgeo_callbacks.rules.default_rules`), announces each alert once (a text entry ``capgeo/alerts`` in
    every logger, a W&B alert, a ``logging`` warning on the ``capgeo`` logger, ``on_alert(alert)``), logs each
    forecast as ``forecast/<rule>``, and at the end of fitting writes ``capgeo_summary.json`` to the run's log
    folder with the story figure, the verdict (``capgeo/verdict``), the RankMe heatmap and hparams. Side effects
    happen on rank zero only; the rules run on every rank on identical (synchronised) values.

    Args:
        monitor: accuracy key in ``trainer.callback_metrics``.
        logprob_monitor: answer log-prob key, for log-prob emergence (``None`` to skip).
        rankme_prefix: tag prefix of the RankMe series, ending in ``/``.
        settings: detection settings (default :class:`~capgeo_callbacks.DetectionSettings()`).
        on_alert: called with each :class:`~capgeo_callbacks.detection.Alert` when it is raised.
        run_info: run facts stored at the top of the summary and read by the rules (task, budget, chance, ...).
        live_figures: also publish the story card where a rule first warns and where acquisition is confirmed (the
            full story figure and the heatmap are drawn at the end either way).
        record: prefixes of the logged scalars recorded at every evaluation (beside the accuracy), so any rule
            can be re-scored from the summary alone: a step-logged scalar (``train/acc``) is recorded as its latest
            value; ``train/loss`` is always the mean training loss since the previous evaluation.
        token_acc_monitor: per-token accuracy key, for the chance label (``None`` to skip).
        rules: the rules run live (default: :func:`~capgeo_callbacks.rules.default_rules`); one whose inputs the run
            lacks is left out and says so once: a warning where you chose it, an INFO line where it is a default.
        loss_monitor: validation loss key (``None`` to skip). The three monitors are recorded whatever their prefix,
            under the names the rules read: ``val/logprob``, ``val/token_acc`` and ``val/loss``.
        overhead_budget: capgeo's time at most this share of the run's, ``"measure"`` (time, thin nothing), None or 0
            (off): :mod:`~capgeo_callbacks.run.budget`; the summary's ``overhead`` says what capgeo cost the run.

    Raises:
        ValueError: on a bad argument.

    Logged keys:
        ``forecast/<rule>``; ``rankme_early/<layer>``, ``rankme_floor/<layer>``, ``capgeo/alerts_raised``,
        ``capgeo/overhead_share`` (capgeo's share of the run's time so far); text ``capgeo/alerts``, ``capgeo/verdict``;
        images ``capgeo/story``, ``capgeo/rankme_heatmap``; hparams ``capgeo/acquisition_step``, ``capgeo/gap``,
        ``capgeo/layer_order_rho``, ``capgeo/final_acc``.

    Example::

        trainer = Trainer(callbacks=[RankMeMonitor(), PrecursorDetector(on_alert=print)])
    """

    def __init__(self, monitor: str = VAL_ACC, logprob_monitor: str | None = LOGPROB, rankme_prefix: str = RANKME,
                 settings: DetectionSettings | None = None, on_alert: Callable[[Alert], Any] | None = None,
                 run_info: Mapping[str, Any] | None = None, live_figures: bool = True,
                 record: Sequence[str] = ("val/", "train/"), token_acc_monitor: str | None = TOKEN_ACC,
                 rules: Sequence[Rule] | None = None, loss_monitor: str | None = VAL_LOSS,
                 overhead_budget: OverheadSetting = DEFAULT_OVERHEAD_BUDGET) -> None:
        if isinstance(record, str) or not all(isinstance(prefix, str) and prefix for prefix in record):
            raise ValueError(f"record must be a sequence of non-empty tag prefixes (e.g. ('val/',)), got {record!r}")
        self.record = tuple(record)
        chosen = rules is not None
        rules = default_rules(settings, rankme_prefix) if rules is None else rules
        self.session = RunSession(rules, settings, run_info, monitor=monitor, logprob_key=logprob_monitor,
                                  token_acc_key=token_acc_monitor, rankme_prefix=rankme_prefix, on_alert=on_alert,
                                  live_figures=live_figures, warn=WarnOnce("PrecursorDetector"), loss_key=loss_monitor,
                                  rules_chosen=chosen, overhead_budget=overhead_budget)
        self._loss_sum, self._loss_count = 0.0, 0  # training losses since the previous evaluation
        self._loss_pending: list[torch.Tensor] = []  # this interval's, still tensors: no device sync in a step
        self._loss_chunks: list[tuple[torch.Tensor, torch.Tensor]] = []  # (sum, count) of each 64 pending

    @cached_property  # Lightning reads it at every hook call (its profiler's name): formatted once
    def state_key(self) -> str:  # type: ignore[override]
        return self._generate_state_key(monitor=self.monitor, rankme_prefix=self.session.keys.rankme_prefix)

    # what the session holds, read through
    monitor = property(lambda self: self.session.monitor)
    settings = property(lambda self: self.session.settings)
    run_info = property(lambda self: self.session.run_info)
    on_alert = property(lambda self: self.session.on_alert)
    view = property(lambda self: self.session.view, doc="The run at its latest evaluation (the session's view).")
    acc = property(lambda self: self.session.acc, doc="``[[step, accuracy], ...]`` at every evaluation so far.")
    scalars = property(lambda self: self.session.scalars, doc="Every other recorded scalar, by tag.")
    alerts = property(lambda self: self.session.alerts, doc="Every rule's alerts so far.")
    acquired_step = property(lambda self: self.session.acquired_step, doc="The acquisition step, once confirmed.")
    summary = property(lambda self: self.session.summary, doc="The latest summary built (the written one at the end).")

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.session.is_zero = trainer.is_global_zero

    @override
    @never_fails
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if "max_steps" not in self.session.run_info and trainer.max_steps > 0:  # the budget rules and scorers read
            self.session.add_run_info({"max_steps": trainer.max_steps})
        tags = [tag for cb in trainer.callbacks if isinstance(cb, MeasureCallback) for tag in cb.tags]
        self.session.start(TrainerPublisher(trainer, self.session.warn), tags)
        if self.session.budget is not None:  # over the whole run's steps (the run info's, if stopped early)
            budget_measures(self.session.budget, trainer, self.session.reads, steps_of(
                self.run_info.get("max_steps"), trainer.max_steps, lambda: trainer.estimated_stepping_batches))

    @override
    @never_fails
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            self._loss_pending.append(loss.detach())
            if len(self._loss_pending) >= 64:  # bounded memory: summed on the device, nothing read back
                self._loss_chunks.append(_finite_sum(self._loss_pending))
                self._loss_pending = []

    def _flush_losses(self) -> None:
        """Add the losses held as tensors to the interval's sum and count: at an evaluation or a checkpoint, the
        only places they are read on the host."""
        if self._loss_pending:
            self._loss_chunks.append(_finite_sum(self._loss_pending))
            self._loss_pending = []
        for total, count in self._loss_chunks:
            self._loss_sum += float(total)
            self._loss_count += int(count)
        self._loss_chunks = []

    def _scalars_now(self, trainer: pl.Trainer) -> dict[str, float]:
        """Every scalar under ``record`` (not the monitor), the mean training loss since the last evaluation and
        the first optimizer's learning rate."""
        named = set(self.session.keys.renamed)
        scalars = {tag: float(value) for tag, value in trainer.callback_metrics.items()
                   if tag != self.monitor and (tag.startswith(self.record) or tag in named)}
        self._flush_losses()
        if self._loss_count:
            scalars[TRAIN_LOSS] = self._loss_sum / self._loss_count
        self._loss_sum, self._loss_count = 0.0, 0
        if trainer.optimizers and trainer.optimizers[0].param_groups:
            scalars[LR] = float(trainer.optimizers[0].param_groups[0]["lr"])
        return scalars

    @override
    @never_fails
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            self.session.warn("monitor", f"monitored metric {self.monitor!r} was not logged; available: "
                              f"{', '.join(sorted(metrics)) or 'none'}")
            return
        self.session.evaluate(trainer.global_step, float(metrics[self.monitor]), self._scalars_now(trainer),
                              measurements_of(trainer, pl_module), TrainerPublisher(trainer, self.session.warn),
                              max_steps=trainer.max_steps)

    @override
    @never_fails
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        log_dir = trainer.log_dir  # a collective under DDP: every rank asks
        self.session.finish(measurements_of(trainer, pl_module), trainer.global_step,
                            TrainerPublisher(trainer, self.session.warn), log_dir)

    @override
    def state_dict(self) -> dict[str, Any]:
        self._flush_losses()
        return {**self.session.state_dict(), "record_prefixes": list(self.record),
                "loss_since_evaluation": [self._loss_sum, self._loss_count]}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.session.load_state_dict(state_dict)
        self._loss_sum, self._loss_count = state_dict.get("loss_since_evaluation", [0.0, 0])
        self._loss_pending, self._loss_chunks = [], []


def _finite_sum(losses: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The sum and the count of the finite ``losses``, on their device. In float64: the sum of float32 losses is
    then exact, so a run resumed mid-interval adds up the same."""
    values = torch.stack([value.double().reshape(()) for value in losses])
    finite = torch.isfinite(values)
    return torch.where(finite, values, 0.0).sum(), finite.sum()
