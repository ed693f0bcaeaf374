r"""Precursor detector
==================

The Lightning adapter of the run engine (:mod:`capgeo_callbacks.engine`): it owns the run's engine and joins it to its
Trainer at ``setup``; at the start of fitting it takes the measure callbacks that joined the Trainer (in the order of
its callbacks) and hands them the overhead budget; at every validation it feeds the session the monitored accuracy
(read from ``trainer.callback_metrics``, as ``EarlyStopping`` reads its ``monitor``), the logged scalars under
``record``, the mean training loss since the previous evaluation, the learning rate and the measures' series. The
session runs the rules (default: :func:`~capgeo_callbacks.rules.default_rules`), announces each alert once (a text
entry ``capgeo/alerts`` in every logger, a W&B alert, a ``logging`` warning on the ``capgeo`` logger,
``on_alert(alert)``), logs each forecast as ``forecast/<rule>``, and at the end of fitting writes
``capgeo_summary.json`` to the run's log folder with the story figure, the verdict (``capgeo/verdict``), the RankMe
heatmap and hparams. Side effects happen on rank zero only; the rules run on every rank on identical (synchronised)
values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from capgeo_callbacks.detection import Alert, DetectionSettings
from capgeo_callbacks.engine.joined import joined
from capgeo_callbacks.engine.run import RunEngine
from capgeo_callbacks.keys import LOGPROB, RANKME, TOKEN_ACC, VAL_ACC, VAL_LOSS
from capgeo_callbacks.publish.loggers import TrainerPublisher
from capgeo_callbacks.rules import Rule
from capgeo_callbacks.run.budget import DEFAULT_OVERHEAD_BUDGET, OverheadSetting, steps_of
from capgeo_callbacks.run.failures import never_fails


class PrecursorDetector(Callback):
    r"""Run capgeo's rules on a Lightning run as it trains, announce their alerts and write the run's summary, fed by
    the measure callbacks of its Trainer (:class:`~capgeo_callbacks.RankMeMonitor`, ...; module docstring).

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
        self.engine = RunEngine.build(rules, settings, run_info, owner="PrecursorDetector", monitor=monitor,
                                      logprob_key=logprob_monitor, token_acc_key=token_acc_monitor,
                                      rankme_prefix=rankme_prefix, on_alert=on_alert, live_figures=live_figures,
                                      loss_key=loss_monitor, overhead_budget=overhead_budget)
        self.session = self.engine.session

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
        joined(trainer).join_engine(self.engine)  # the stopper and the progress bar read the run from here

    @override
    @never_fails
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if "max_steps" not in self.session.run_info and trainer.max_steps > 0:  # the budget rules and scorers read
            self.session.add_run_info({"max_steps": trainer.max_steps})
        for measure in joined(trainer).measures:  # every measure callback joined at its setup, in callback order
            self.engine.add(measure)
        # the budget over the whole run's steps (the run info's, if stopped early)
        self.engine.start(TrainerPublisher(trainer, self.session.warn), steps_of(
            self.run_info.get("max_steps"), trainer.max_steps, lambda: trainer.estimated_stepping_batches),
            steps_of(trainer.max_steps))

    @override
    @never_fails
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.engine.losses.add(outputs.get("loss") if isinstance(outputs, Mapping) else outputs)

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
        groups = trainer.optimizers[0].param_groups if trainer.optimizers else []
        scalars = self.engine.scalars(metrics, self.record, float(groups[0]["lr"]) if groups else None)
        self.engine.evaluate(trainer.global_step, float(metrics[self.monitor]), scalars,
                             TrainerPublisher(trainer, self.session.warn), max_steps=trainer.max_steps,
                             parameters=_parameters(pl_module))

    @override
    @never_fails
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        log_dir = trainer.log_dir  # a collective under DDP: every rank asks
        self.engine.finish(trainer.global_step, TrainerPublisher(trainer, self.session.warn), log_dir,
                           parameters=_parameters(pl_module))

    @override
    def state_dict(self) -> dict[str, Any]:
        return {**self.engine.state_dict(), "record_prefixes": list(self.record)}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.engine.load_state_dict(state_dict)


def _parameters(module: Any) -> int:
    return sum(p.numel() for p in module.parameters())
