r"""Framework compatibility
=======================

The few places where capgeo relies on Lightning or ``transformers`` beyond their documented API, all in this module,
each named with the versions it was read from and what happens where it is missing. CI runs the tests touching them
on the oldest versions ``pyproject.toml`` allows (Lightning 2.4, transformers 4.40) and on the newest.

- :func:`validate_after_this_batch`: ``Trainer.val_check_batch``, public by name but undocumented.
- :func:`validate_now`: Lightning's validation loop run before the first training batch, with the logger
  connector's private ``_first_loop_iter`` kept.
- :func:`logged_step`: the fit loop's private ``_batches_that_stepped``, the step Lightning logs at.
- :func:`calling_handler`: the ``transformers`` ``CallbackHandler`` calling a callback, found up the call stack
  where the callback was not attached to its Trainer.
- :func:`mlflow_keys`: the keys ``transformers``' MLflow integration sends as they are before its later versions.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl

__all__ = ["calling_handler", "logged_step", "mlflow_keys", "schedules_validation", "validate_after_this_batch",
           "validate_now"]

NEVER = sys.maxsize  # a validation interval no batch count reaches
MLFLOW_REFUSED = re.compile(r"[^0-9A-Za-z_\-. :/]")  # the characters MLflow refuses in a metric's name


def schedules_validation(trainer: pl.Trainer) -> bool:
    """Whether :func:`validate_after_this_batch` can decide ``trainer``'s validations: its validation interval is
    counted in batches (Lightning 2.6's time-based ``val_check_interval`` leaves ``val_check_batch`` unread)."""
    return isinstance(getattr(trainer, "val_check_interval", None), (int, float))


def validate_after_this_batch(trainer: pl.Trainer, validate: bool) -> None:
    """Make the fit loop validate after the current training batch, or not.

    Read from Lightning 2.4 to 2.6 (``_TrainingEpochLoop._should_check_val_fx``): after each batch the loop validates
    when ``(n + 1) % trainer.val_check_batch == 0``, ``n`` the batch's index (in the epoch, or in the run when
    ``check_val_every_n_epoch=None``), provided the epoch is one to validate in; so 1 says yes whatever ``n``, and a
    number no count reaches says no. Lightning still validates where it always does whatever the interval: when a
    stop is requested mid-epoch, and at the end of an epoch of unknown length read through ``dataloader_iter``.
    Set from ``on_train_start`` on (the fit loop sets it from ``val_check_interval`` when it loads the data).
    """
    trainer.val_check_batch = 1 if validate else NEVER


def validate_now(trainer: pl.Trainer) -> None:
    """Run the fit loop's validation now, from ``on_train_batch_start`` (before the first optimizer step), as
    Lightning runs it after a batch.

    Read from Lightning 2.4 to 2.6 (``_TrainingEpochLoop.on_advance_end``): the validation loop resets the logger
    connector's private ``_first_loop_iter``, which the training batch under way needs back (Lightning asserts it
    at the batch's end). Where the connector has no such attribute, there is nothing to restore.
    """
    connector = getattr(trainer, "_logger_connector", None)
    first_iteration = getattr(connector, "_first_loop_iter", None)
    trainer.validating = True
    trainer.fit_loop.epoch_loop.val_loop.run()
    trainer.training = True
    if connector is not None and hasattr(connector, "_first_loop_iter"):
        connector._first_loop_iter = first_iteration


def logged_step(trainer: pl.Trainer, default: int) -> int:
    """The step Lightning logs the current validation's metrics at during ``fit``: the training batches that took an
    optimizer step before this validation, where ``trainer.global_step`` counts every optimizer's steps.

    Read from Lightning 2.4 to 2.6 (``LoggerConnector.log_metrics``): the fit loop's private
    ``_batches_that_stepped``, saved in checkpoints under that name. Where it is missing: ``default``.
    """
    return int(getattr(trainer.fit_loop.epoch_loop, "_batches_that_stepped", default))


def calling_handler(callback: Any, handler_type: type) -> Any | None:
    """The ``handler_type`` (``transformers``' ``CallbackHandler``) calling ``callback`` now: the nearest frame up
    the stack whose ``self`` is one holding ``callback`` (None if none is, or where the interpreter keeps no frames).

    The fallback where ``callback`` was not attached to its Trainer: read from transformers 4.40 to 5.x, where the
    handler's ``call_event`` calls each callback's event method, with the handler as its ``self``.
    """
    frame = inspect.currentframe()
    try:
        while frame is not None:
            owner = frame.f_locals.get("self")
            if isinstance(owner, handler_type) and any(one is callback for one in owner.callbacks):
                return owner
            frame = frame.f_back
        return None
    finally:
        del frame  # a frame held in a local keeps its whole stack alive


def mlflow_keys(logs: Mapping[str, float]) -> dict[str, float]:
    """``logs`` with the characters MLflow refuses in a key replaced by ``_`` (``rankme/layers.0+final_norm`` ->
    ``rankme/layers.0_final_norm``), as transformers 5.x's ``MLflowCallback.on_log`` replaces them itself; 4.40's
    sends them as they are, and MLflow then drops the whole batch. Replacing twice changes nothing."""
    return {MLFLOW_REFUSED.sub("_", key): value for key, value in logs.items()}
