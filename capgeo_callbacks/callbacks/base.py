"""Lightning's hooks on capgeo's measures: each measure class of :mod:`capgeo_callbacks.engine` with the hooks that
drive it on a Lightning Trainer, and nothing else (the series, the cadence, the budget and the measuring are the
engine's, shared with the Hugging Face callback).

At ``setup`` a measure callback finds its layers in the module and joins the Trainer's record
(:mod:`~capgeo_callbacks.engine.joined`), where the :class:`~capgeo_callbacks.PrecursorDetector` reads its series and
hands it the run's overhead budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from capgeo_callbacks.engine.gradient import GradientMeasure
from capgeo_callbacks.engine.joined import joined
from capgeo_callbacks.engine.measure import Measure, ModelMeasure
from capgeo_callbacks.integrations.compat import logged_step as lightning_logged_step
from capgeo_callbacks.run.failures import never_fails

__all__ = ["GradientMeasureCallback", "MeasureCallback", "ModelMeasureCallback"]


class MeasureCallback(Measure, Callback):
    """Base of the Lightning measure callbacks: a :class:`~capgeo_callbacks.engine.Measure` (its series
    ``series[tag] = [[step, value], ...]``, rows, cadence and budget) with Lightning's hooks.

    :class:`~capgeo_callbacks.PrecursorDetector` reads the series (nothing else keeps a copy), and a resumed run
    continues them without gaps or duplicates (the callback's state).

    Args:
        every_n_evals: measure at every n-th validation (1 = every one).
    """

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.watch(pl_module)  # raises: a configuration error, before the first step
        joined(trainer).join_measure(self)

    def should_measure(self, trainer: pl.Trainer) -> bool:
        """Whether the validation now starting is one this callback measures at (counted once per validation; never
        the sanity check)."""
        return not trainer.sanity_checking and self.due(trainer.global_step)

    def record(self, trainer: pl.Trainer, step: int, values: Mapping[str, float]) -> None:
        """Append the finite ``values`` at ``step`` to the series and log them to every logger of ``trainer``.

        Through each logger's ``log_metrics`` (rank zero only; the values are identical on every rank, the
        rows being gathered first), not ``pl_module.log``, which costs a few milliseconds per key and per
        evaluation; so these tags are not in ``trainer.callback_metrics``.
        """
        finite = self.add_values(step, values)
        if finite and trainer.is_global_zero:
            # the step Lightning logs the validation's own metrics at (optimizer steps taken before this
            # validation's hooks ran), so that RankMe and val/acc line up in every logger
            logged_step = lightning_logged_step(trainer, step)
            for logger in trainer.loggers:
                logger.log_metrics(finite, step=logged_step if trainer.state.fn == "fit" else step)


class ModelMeasureCallback(ModelMeasure, MeasureCallback):
    """A :class:`~capgeo_callbacks.engine.ModelMeasure` on Lightning: read from the module at the start of each
    validation it measures at, on the weights that validation sees."""

    @override
    @never_fails
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        with self.timed():  # in the overhead budget, like every measure's work
            if self.should_measure(trainer):
                self.record(trainer, trainer.global_step, self.measure_model(pl_module, trainer.global_step))


class GradientMeasureCallback(GradientMeasure, ModelMeasureCallback):
    r"""Base of the gradient-based monitors on Lightning: a :class:`~capgeo_callbacks.engine.GradientMeasure` (the
    fixed training batch, measured at evaluations) fed the first training batches in ``on_train_batch_start`` and
    measured in ``on_validation_start``.

    Lightning runs that hook under ``torch.no_grad`` (``torch.inference_mode`` in ``Trainer.validate``), so the
    measure leaves it on the cached tensors. At step 0 the batch is the first training batch, cached when Lightning
    fetches it for the first step (:class:`~capgeo_callbacks.EvaluationSchedule` hands it over before step 0's
    validation).

    Its arguments (``loss_fn``, ``forward``, ``num_examples``, ``every_n_evals``: here every n-th validation) are
    :class:`~capgeo_callbacks.engine.GradientMeasure`'s.
    """

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        # a batch the default loss cannot read is a configuration error: it raises here, before the first update
        if self.caching:
            self.cache(batch, key=(trainer.global_step, batch_idx))
