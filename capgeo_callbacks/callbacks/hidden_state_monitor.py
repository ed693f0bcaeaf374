r"""Hidden-state monitor
====================

The Lightning driver of a hidden-state measure (:class:`~capgeo_callbacks.engine.HiddenStateMeasure`): its unit's
hooks ride on the validation pass of the evaluations it measures (attached at the start of the pass, removed at its
end or on failure), each validation batch goes to it, and at the end of the pass its values (the rows of every rank
gathered first) are appended to its series and logged.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import lightning.pytorch as pl
from torch import Tensor
from typing_extensions import override

from capgeo_callbacks.callbacks.base import MeasureCallback
from capgeo_callbacks.capture.hooks import LabelsFn
from capgeo_callbacks.capture.selectors import Selector
from capgeo_callbacks.capture.unit import HiddenStateUnit, RowMeasure
from capgeo_callbacks.engine.hidden import HiddenStateMeasure, gather_on
from capgeo_callbacks.run.failures import never_fails


@dataclass(frozen=True)
class _MeasureRows(RowMeasure):
    """The earlier way, read for a release: a monitor's ``measure_rows(layer, rows, labels, step)``."""

    def value(self, layer: str, rows: Tensor, labels: Tensor | None, step: int | None) -> float | None:
        return self.fn(layer, rows, labels, step)  # type: ignore[call-arg]


class HiddenStateMonitor(HiddenStateMeasure, MeasureCallback):
    """Measure hidden states on the validation pass: a thin Lightning driver of a
    :class:`~capgeo_callbacks.engine.HiddenStateMeasure`.

    A measure of one's own is a :class:`~capgeo_callbacks.RowMeasure` (a function of one layer's rows, and of their
    labels where it reads them): a subclass names it in ``row_measures``, or it is passed as ``measures``
    (docs/measures.md, "Adding a measure").

    Args:
        layers: module names or globs over ``pl_module.named_modules()``; None: the transformer's blocks and final
            norm, found at ``setup`` (:func:`~capgeo_callbacks.capture.layers.find_blocks`) and said once in the log.
        selector: token rows (docs/design.md, "RankMe rows"); None: what the first validation batch supports, said
            once in the log.
        num_rows: rows per layer (None: the first 2048 the validation pass gives, or all it has).
        every_n_evals: measure at every n-th validation.
        mask_key: batch key of the answer mask, for the answer selectors.
        prefix: tag prefix, without ``/``, of a single row measure (default: its own).
        labels_fn: ``labels_fn(batch)``: one integer label per selected row, for the measures that read labels.
        measures: the row measures (default: the class's ``row_measures``).
        unit: the measuring unit itself (then ``selector`` to ``measures`` are its own, not these).

    Raises:
        ValueError: on a bad argument, or in ``setup`` if a layer pattern matches no module or, with no ``layers``, if
            no stack of blocks is found.

    Example::

        NORM = RowMeasure("norm", lambda rows, labels: float(rows.double().norm(dim=1).mean()))
        trainer = Trainer(callbacks=[HiddenStateMonitor(layers="model.blocks.*", measures=[NORM])])
    """

    def __init__(self, layers: str | Sequence[str] | None = None, selector: Selector | None = None,
                 num_rows: int | None = None, every_n_evals: int = 1, mask_key: str = "answer_mask",
                 prefix: str | None = None, labels_fn: LabelsFn | None = None, *,
                 measures: Sequence[RowMeasure] | None = None, unit: HiddenStateUnit | None = None) -> None:
        if unit is None and measures is None and not self.row_measures and hasattr(self, "measure_rows"):
            # the earlier way: a subclass's measure_rows(layer, rows, labels, step)
            warnings.warn(f"{type(self).__name__}.measure_rows is deprecated: define the measure as "
                          "RowMeasure(prefix, fn) and name it in row_measures (docs/measures.md, 'Adding a measure')",
                          DeprecationWarning, stacklevel=2)
            measures = [_MeasureRows(prefix or "hidden", self.measure_rows,  # type: ignore[attr-defined]
                                     labels=labels_fn is not None, min_rows=getattr(self, "min_rows", 2))]
            prefix = None
        super().__init__(layers, selector, num_rows, every_n_evals, mask_key, prefix, labels_fn, measures=measures,
                         unit=unit)

    @cached_property  # Lightning reads it at every hook call (its profiler's name): formatted once
    def state_key(self) -> str:  # type: ignore[override]
        return self._generate_state_key(layers=self.layer_patterns, prefix=self.prefix)

    @override
    @never_fails
    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.should_measure(trainer):
            with self.timed():
                self.unit.attach(pl_module)

    @override
    @never_fails
    def on_validation_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                                  batch_idx: int, dataloader_idx: int = 0) -> None:
        if self.unit.is_attached:
            self.feed(batch if dataloader_idx == 0 else None)

    @override
    @never_fails
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        if not self.unit.is_attached:
            self.unit.reset()
            return
        self.unit.detach()
        step = trainer.global_step
        self.record(trainer, step, self.conclude(step, gather_on(pl_module.device)))

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.unit.reset()

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.unit.reset()
