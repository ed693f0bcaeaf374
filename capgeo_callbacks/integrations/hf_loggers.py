r"""Hugging Face Trainer loggers
============================

Where :class:`~capgeo_callbacks.integrations.hf.CapgeoTrainerCallback` publishes: the loggers of the
``transformers.Trainer`` it runs in.

The Trainer hands a training log to every callback's ``on_log``, its ``report_to`` integrations (TensorBoard,
MLflow, W&B, ...) ahead of the user's callbacks, and each integration files it at ``state.global_step``. So a
measurement is a log event of its own, sent when it is made: at the step it was measured, its values (with the
forecasts and the dashboard's series) go into ``state.log_history`` and to the ``on_log`` of every callback of the
Trainer, the integrations and the user's own, except the Trainer's console printers, which would print every value
at every evaluation. The events do not name the Trainer's
:class:`~transformers.trainer_callback.CallbackHandler`: the callback is bound to the Trainer's public
``callback_handler`` by :func:`bind` (``callback.attach(trainer)``), or else finds the handler calling its
``on_train_begin`` up the call stack; at the start of training it moves to the front of the handler's list, so that
at the end of training it publishes before the integrations close their writers and runs.

Text (the alerts, the verdict), images (the story card, the RankMe heatmap), hparams and the custom-scalars layout
go through :mod:`capgeo_callbacks.publish.loggers` to the integrations that can take them, seen as Lightning
loggers: TensorBoard (its writer, in its folder), MLflow (its active run) and W&B (its run); any other integration
gets the scalars. TensorBoard's and W&B's integrations name a training log's key ``train/<key>``
(``transformers``' ``rewrite_logs``), so the layout's patterns carry that prefix; MLflow keeps the key, with the
characters it refuses replaced by ``_``. capgeo's hparams are named ``capgeo/<name>`` here: the integrations log
the Trainer's own arguments (``max_steps``, ``seed``, ...) under the plain names, and MLflow refuses a parameter
logged twice with two values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from lightning.pytorch.loggers import Logger, MLFlowLogger, TensorBoardLogger, WandbLogger

try:  # imported by capgeo_callbacks.integrations.hf only, after its own check
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
    from transformers.integrations import MLflowCallback, TensorBoardCallback, WandbCallback, rewrite_logs
    from transformers.trainer_callback import CallbackHandler, PrinterCallback, ProgressCallback
except ImportError as err:
    raise ImportError("capgeo_callbacks.integrations.hf_loggers needs transformers: "
                      "pip install 'capgeo-callbacks[hf]'") from err

if TYPE_CHECKING:
    from transformers import Trainer

from capgeo_callbacks.integrations.compat import calling_handler, mlflow_keys
from capgeo_callbacks.publish.loggers import TrainerPublisher, WarnFn

__all__ = ["PREFIX", "TrainerLogs", "attach", "bind", "callback_handler", "lightning_loggers", "put_first"]

PREFIX = next(iter(rewrite_logs({"": 0.0})))  # "train/": what TensorBoard and W&B put before a training log's key


def callback_handler(callback: TrainerCallback) -> CallbackHandler | None:
    """The ``CallbackHandler`` calling ``callback`` now (None if none is), found up the call stack: the fallback
    where ``callback`` was not bound to its Trainer (:func:`attach`; :func:`~capgeo_callbacks.integrations.compat.
    calling_handler`)."""
    return calling_handler(callback, CallbackHandler)


def put_first(handler: CallbackHandler, callback: TrainerCallback) -> None:
    """Move ``callback`` to the front of ``handler``'s list. Safe within the handler's loop over the list: the
    callbacks it moves past were called already, the later ones keep their places."""
    handler.callbacks[:] = [callback, *(one for one in handler.callbacks if one is not callback)]


def bind(callback: TrainerCallback, trainer: Trainer) -> CallbackHandler:
    """The public ``callback_handler`` of ``trainer`` (a ``transformers.Trainer``), with ``callback`` added to it if
    it is not there."""
    handler = trainer.callback_handler
    if not any(one is callback for one in handler.callbacks):
        trainer.add_callback(callback)
    return handler


def attach(callback: TrainerCallback, handler: CallbackHandler | None = None) -> CallbackHandler | None:
    """``handler`` (from :func:`bind`) if it holds ``callback``, else the handler calling ``callback`` now
    (:func:`callback_handler`), with ``callback`` moved to the front of its list (:func:`put_first`), so that at the
    end of training it publishes before the integrations close."""
    if handler is None or not any(one is callback for one in handler.callbacks):
        handler = callback_handler(callback)
    if handler is not None:
        put_first(handler, callback)
    return handler


class _TensorBoard(TensorBoardLogger):
    """transformers' ``TensorBoardCallback`` as a Lightning ``TensorBoardLogger``: its writer, in its folder."""

    def __init__(self, callback: TensorBoardCallback) -> None:
        super().__init__(callback.tb_writer.get_logdir(), name="", version="")  # the writer's folder
        self.callback = callback

    @property
    def experiment(self) -> Any:
        return self.callback.tb_writer


def lightning_loggers(callbacks: Sequence[TrainerCallback]) -> list[Logger]:
    """The integrations among ``callbacks`` that take text, images and hparams, as Lightning loggers: a
    TensorBoard writer that is open (``tb_writer``), the MLflow run and the W&B run that are active."""
    loggers: list[Logger] = []
    for callback in callbacks:
        if isinstance(callback, TensorBoardCallback) and callback.tb_writer is not None:
            loggers.append(_TensorBoard(callback))
        elif isinstance(callback, MLflowCallback):
            import mlflow  # installed where the integration is

            run = mlflow.active_run()
            if run is not None:
                loggers.append(MLFlowLogger(tracking_uri=mlflow.get_tracking_uri(), run_id=run.info.run_id))
        elif isinstance(callback, WandbCallback):
            import wandb  # likewise

            if wandb.run is not None:
                loggers.append(WandbLogger(experiment=wandb.run))
    return loggers


@dataclass
class _Integrations:
    """A Trainer's callbacks as a :class:`~capgeo_callbacks.publish.loggers.LoggerHost`."""

    callbacks: Sequence[TrainerCallback]
    is_global_zero: bool
    global_step: int

    @cached_property
    def loggers(self) -> list[Logger]:  # built on first use: most evaluations publish scalars only
        return lightning_loggers(self.callbacks)


class TrainerLogs(TrainerPublisher):
    """Publishes one evaluation (or the run's end) to the loggers of the Trainer whose callbacks ``handler`` calls
    (module docstring): scalars gather into :attr:`values`, which :meth:`log` sends as one log event at
    ``state.global_step``; the rest goes to the integrations as Lightning loggers at once.

    Args:
        handler: the Trainer's callback handler (None: the log history alone).
        source: the callback publishing, left out of the event.
        args, state, control: the Trainer's, as the event that triggered the evaluation gave them.
        event: that event's other arguments (``model``, ``optimizer``, ...), passed on to ``on_log``.
        values: the measured values, first among the scalars.
        warn: how a logger or a callback that fails is reported once.
    """

    def __init__(self, handler: CallbackHandler | None, source: TrainerCallback, args: TrainingArguments,
                 state: TrainerState, control: TrainerControl, event: Mapping[str, Any],
                 values: Mapping[str, float], warn: WarnFn) -> None:
        others = [] if handler is None else [one for one in handler.callbacks if one is not source]
        super().__init__(_Integrations(others, bool(state.is_world_process_zero), int(state.global_step)), warn)
        self.values = dict(values)
        self._others, self._listeners = others, [one for one in others if not _prints(one)]
        self._event = args, state, control, {key: value for key, value in event.items() if key != "logs"}

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        self.values.update(values)

    def hparams(self, params: Mapping[str, Any], metrics: Mapping[str, float]) -> None:
        super().hparams({f"capgeo/{key}": value for key, value in params.items()}, metrics)

    def layout(self, layout: Mapping[str, Any]) -> None:
        super().layout({category: {title: [kind, [re.escape(PREFIX) + pattern for pattern in patterns]]
                                   for title, (kind, patterns) in charts.items()}
                        for category, charts in layout.items()})

    def log(self) -> None:
        """:attr:`values` as one log event at ``state.global_step``: an entry of ``state.log_history``, and every
        callback's ``on_log`` but the console printers'; a callback that fails is reported once and skipped."""
        args, state, control, event = self._event
        state.log_history.append({**self.values, "step": state.global_step})
        for callback in self._listeners:
            try:
                logs = mlflow_keys(self.values) if isinstance(callback, MLflowCallback) else dict(self.values)
                callback.on_log(args, state, control, logs=logs, **event)
            except Exception as error:  # noqa: BLE001 - a logger's failure must not stop training
                name = type(callback).__name__
                self.warn(f"{name}:on_log", f"{name}.on_log failed on capgeo's values ({type(error).__name__}: "
                          f"{str(error)[:200]}); skipped")

    def progress(self, figures: Mapping[str, str]) -> None:
        """``figures`` beside the Trainer's progress bar (``ProgressCallback``'s, shown at its next update)."""
        for callback in self._others:
            bar = getattr(callback, "training_bar", None) if isinstance(callback, ProgressCallback) else None
            if bar is not None:
                bar.set_postfix(dict(figures), refresh=False)


def _prints(callback: TrainerCallback) -> bool:
    """Whether ``callback`` is one of the Trainer's console printers (its bar, its printer, its notebook table)."""
    return isinstance(callback, (ProgressCallback, PrinterCallback)) or \
        type(callback).__module__.startswith("transformers.utils.notebook")
