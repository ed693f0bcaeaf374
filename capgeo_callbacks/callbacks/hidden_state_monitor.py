r"""Hidden-state monitor
====================

The Lightning driver of a hidden-state measuring unit (:mod:`capgeo_callbacks.capture.unit`): the unit's hooks ride
on the validation pass of the evaluations it measures, each validation batch goes to it, and at the end of the pass
its values (the rows of every rank gathered first) are appended to the monitor's series and logged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor
from typing_extensions import override

from capgeo_callbacks.callbacks.base import MeasureCallback
from capgeo_callbacks.callbacks.distributed import gather_rows
from capgeo_callbacks.capture.hooks import LabelsFn
from capgeo_callbacks.capture.layers import describe_blocks
from capgeo_callbacks.capture.selectors import Selector
from capgeo_callbacks.capture.unit import HiddenStateUnit
from capgeo_callbacks.run.budget import OverheadBudget
from capgeo_callbacks.run.failures import never_fails


class HiddenStateMonitor(MeasureCallback):
    """Base of the monitors that measure hidden states on the validation pass: a thin Lightning driver of one
    :class:`~capgeo_callbacks.capture.unit.HiddenStateUnit`.

    A measure of one's own subclasses it and implements :meth:`measure_rows` (rows and labels of one layer -> value
    or None): the unit is then built from the arguments and measures with it. capgeo's monitors pass their own
    ``unit`` (:class:`~capgeo_callbacks.capture.unit.RankMeUnit`, :class:`~capgeo_callbacks.capture.unit.ProbeUnit`).

    Args:
        layers: module names or globs over ``pl_module.named_modules()``; None: the transformer's blocks and final
            norm, found at ``setup`` (:func:`~capgeo_callbacks.capture.layers.find_blocks`) and said once in the log.
        selector: token rows (docs/design.md, "RankMe rows"); None: what the first validation batch supports, said
            once in the log.
        num_rows: rows per layer (None: the first 2048 the validation pass gives, or all it has).
        every_n_evals: measure at every n-th validation.
        mask_key: batch key of the answer mask, for the answer selectors.
        prefix: tag prefix, without ``/``.
        labels_fn: ``labels_fn(batch)``: one integer label per selected row, handed to :meth:`measure_rows`.
        unit: the measuring unit itself (then ``selector`` to ``labels_fn`` are its own, not these).

    Raises:
        ValueError: on a bad argument, or in ``setup`` if a layer pattern matches no module or, with no ``layers``, if
            no stack of blocks is found.
    """

    min_rows = 2  # fewer rows than this are not measured (of a unit built from the arguments)

    def __init__(self, layers: str | Sequence[str] | None, selector: Selector | None = None,
                 num_rows: int | None = None, every_n_evals: int = 1, mask_key: str = "answer_mask",
                 prefix: str = "hidden", labels_fn: LabelsFn | None = None, *,
                 unit: HiddenStateUnit | None = None) -> None:
        super().__init__(every_n_evals)
        patterns = None if layers is None else [layers] if isinstance(layers, str) else list(layers)
        if patterns is not None and (not patterns or not all(isinstance(p, str) and p for p in patterns)):
            raise ValueError(f"layers must be module names or globs (non-empty strings), got {layers!r}")
        self.layer_patterns: list[str] | None = patterns  # None: the blocks find_blocks finds at setup
        self._said_layers = False
        self.unit = unit if unit is not None else HiddenStateUnit(
            selector, num_rows, mask_key=mask_key, prefix=prefix, labels_fn=labels_fn, measure=self.measure_rows,
            min_rows=self.min_rows)
        self.unit.warn = self.warn_once

    def measure_rows(self, name: str, rows: Tensor, labels: Tensor | None, step: int | None) -> float | None:
        """The value of one layer's rows (N, D) and labels (N,) or None (a subclass's measure)."""
        raise NotImplementedError(f"{type(self).__name__} implements measure_rows or passes a unit")

    # the unit's configuration, read through
    prefix = property(lambda self: self.unit.prefix)
    selector: Selector = property(lambda self: self.unit.selector)  # type: ignore[assignment]
    num_rows = property(lambda self: self.unit.num_rows)
    mask_key = property(lambda self: self.unit.mask_key)
    selector_name = property(lambda self: self.unit.selector_name)
    tags = property(lambda self: self.unit.tags, doc="The logged tags, in layer (depth) order.")
    layer_names = property(lambda self: list(self.unit.layers), doc="The watched modules, in depth order.")
    layer_tags = property(lambda self: dict(self.unit.layers), doc="Each watched module's name in the tags.")
    left_out = property(lambda self: dict(self.unit.left_out),
                        doc="Measures left out for lack of their inputs, by tag prefix, with why (the summary's).")

    def report_to(self, warn: Callable[[str, str], Any]) -> None:
        """Report problems through ``warn(key, message)`` (offline analysis keeps them for its summary)."""
        self.warn_once = self.unit.warn = warn  # type: ignore[assignment]

    @cached_property  # Lightning reads it at every hook call (its profiler's name): formatted once
    def state_key(self) -> str:  # type: ignore[override]
        return self._generate_state_key(layers=self.layer_patterns, prefix=self.prefix)

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.unit.watch_modules(pl_module, self.layer_patterns)  # raises: configuration error, naming what to pass
        if self.layer_patterns is None and not self._said_layers:
            self._said_layers = True
            rank_zero_info(f"{type(self).__name__} watches {describe_blocks(self.layer_names)}: found in "
                           f"{type(pl_module).__name__}; pass layers=[...] to choose")

    @override
    def use_budget(self, budget: OverheadBudget | None, rule_input: bool = False) -> None:
        super().use_budget(budget, rule_input)
        self.unit.capture.timing = self.timed  # the forward hooks' work too

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
            if self.unit.selector is None and dataloader_idx == 0:
                rank_zero_info(f"{type(self).__name__} reads the rows {self.unit.choose_selector(batch)!r} (what the "
                               "validation batches hold); pass selector=... to choose")
            with self.timed():
                self.unit.update(batch if dataloader_idx == 0 else None)

    @override
    @never_fails
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        measuring = self.unit.is_attached
        self.evaluations += 1
        if not measuring:
            self.unit.reset()
            return

        def gather(block: Tensor) -> Tensor:  # a collective: every rank, every layer, in the same order
            return gather_rows(block.to(pl_module.device))

        with self.timed():
            computed = self.unit.compute(trainer.global_step, gather)
            self.rows.update(computed.rows)
            self.record(trainer, trainer.global_step, computed.values)

    @property
    def config(self) -> dict[str, Any]:
        """How this monitor measures: what offline analysis reads to measure the same layers and rows again."""
        return {"layers": list(self.layer_patterns or self.layer_names), **self.unit.config,
                "every_n_evals": self.every_n_evals}

    @override
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "config": self.config}

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.unit.reset()

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.unit.reset()
