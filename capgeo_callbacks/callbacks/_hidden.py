"""Glue shared by the hidden-state monitors (RankMe, probes): resolving the watched layers, running a
:class:`~capgeo_callbacks.capture.hooks.HiddenStateCapture` over the validation pass, gathering rows under DDP."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor
from typing_extensions import override

from capgeo_callbacks.callbacks.base import MeasureCallback
from capgeo_callbacks.callbacks.distributed import gather_rows
from capgeo_callbacks.capture.hooks import HiddenStateCapture, LabelsFn
from capgeo_callbacks.capture.layers import describe_blocks, find_blocks, resolve_layers, short_names
from capgeo_callbacks.capture.measuring import usable_rows
from capgeo_callbacks.capture.selectors import Selector, default_selector, selector_name, validate_selector
from capgeo_callbacks.run.failures import check_positive_int, never_fails

DEFAULT_NUM_ROWS = 2048  # rows per layer when none is set: the first 2048 the validation pass gives, or all it has


class HiddenStateMonitor(MeasureCallback):
    """Base of the monitors that measure captured hidden-state rows at the end of a validation pass.

    Subclasses implement :meth:`measure_rows` (rows and labels of one layer -> value or None).
    """

    min_rows = 2

    def __init__(self, layers: str | Sequence[str] | None, selector: Selector | None, num_rows: int | None,
                 every_n_evals: int, mask_key: str, prefix: str, labels_fn: LabelsFn | None = None) -> None:
        super().__init__(every_n_evals)
        if selector is not None:  # None: chosen from the first validation batch (default_selector)
            validate_selector(selector)
        self.rows_given = num_rows is not None  # fewer rows than a number the user set is said; than the default, not
        num_rows = DEFAULT_NUM_ROWS if num_rows is None else num_rows
        check_positive_int("num_rows", num_rows, self.min_rows)
        patterns = None if layers is None else [layers] if isinstance(layers, str) else list(layers)
        if patterns is not None and (not patterns or not all(isinstance(p, str) and p for p in patterns)):
            raise ValueError(f"layers must be module names or globs (non-empty strings), got {layers!r}")
        if not isinstance(prefix, str) or not prefix or "/" in prefix:
            raise ValueError(f"prefix must be a non-empty tag prefix without '/', got {prefix!r}")
        self.layer_patterns: list[str] | None = patterns  # None: the blocks find_blocks finds at setup
        self.selector = selector
        self.num_rows = num_rows
        self.mask_key = mask_key
        self._prefix = prefix
        self._said_layers = False
        self.layer_names: list[str] = []
        self.layer_tags: dict[str, str] = {}
        self.capture = HiddenStateCapture(selector, num_rows, mask_key, labels_fn, warn=self.warn_once)

    @property
    def prefix(self) -> str:
        return self._prefix

    @property
    def selector_name(self) -> str:
        return "auto" if self.selector is None else selector_name(self.selector)

    @cached_property  # Lightning reads it at every hook call (its profiler's name): formatted once
    def state_key(self) -> str:  # type: ignore[override]
        return self._generate_state_key(layers=self.layer_patterns, prefix=self.prefix)

    @property
    def tags(self) -> list[str]:
        """The logged tags, in layer (depth) order."""
        return [f"{self.prefix}/{self.layer_tags[name]}" for name in self.layer_names]

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.layer_patterns is None:
            self.layer_names = find_blocks(pl_module)  # raises: configuration error, naming what to pass
            if not self._said_layers:
                self._said_layers = True
                rank_zero_info(f"{type(self).__name__} watches {describe_blocks(self.layer_names)}: found in "
                               f"{type(pl_module).__name__}; pass layers=[...] to choose")
        else:
            self.layer_names = resolve_layers(pl_module, self.layer_patterns)  # raises: configuration error
        self.layer_tags = short_names(self.layer_names)

    def measure_rows(self, name: str, rows: Tensor, labels: Tensor | None, step: int) -> float | None:
        raise NotImplementedError

    @override
    @never_fails
    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.should_measure(trainer):
            modules = dict(pl_module.named_modules())
            self.capture.attach({name: modules[name] for name in self.layer_names})

    @override
    @never_fails
    def on_validation_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                                  batch_idx: int, dataloader_idx: int = 0) -> None:
        if self.capture.is_attached:
            if self.selector is None and dataloader_idx == 0:
                self.selector = self.capture.selector = default_selector(batch, self.mask_key)
                rank_zero_info(f"{type(self).__name__} reads the rows {self.selector!r} (what the validation batches "
                               "hold); pass selector=... to choose")
            self.capture.set_batch(batch if dataloader_idx == 0 else None)

    @override
    @never_fails
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        measuring = self.capture.is_attached
        self.capture.detach()
        unlabelled = self.capture.unlabelled  # said once already: no second word about the empty layers
        captured = self.capture.take()
        self.evaluations += 1
        if not measuring:
            return
        step = trainer.global_step
        values: dict[str, float] = {}
        for name in self.layer_names:  # same order on every rank: gather_rows is a collective
            rows, labels = captured.get(name, (torch.zeros(0, 0), None))
            rows = gather_rows(rows.to(pl_module.device))[: self.num_rows]
            if labels is not None:
                labels = gather_rows(labels[:, None].to(pl_module.device))[: self.num_rows, 0]
            tag = f"{self.prefix}/{self.layer_tags[name]}"
            count = rows.shape[0]
            if count < self.min_rows and unlabelled:
                continue
            if not usable_rows(name, count, self.min_rows, self.num_rows if self.rows_given else count,
                               self.warn_once):
                continue
            value = self.measure_rows(name, rows, labels, step)
            if value is not None:
                values[tag] = value
                self.rows[tag] = int(count)
        self.record(trainer, step, values)

    @property
    def config(self) -> dict[str, Any]:
        """How this monitor measures: what offline analysis reads to measure the same layers and rows again."""
        selector = None if self.selector is None else self.selector_name  # None: not chosen yet
        return {"layers": list(self.layer_patterns or self.layer_names), "selector": selector,
                "num_rows": self.num_rows, "prefix": self.prefix, "mask_key": self.mask_key,
                "every_n_evals": self.every_n_evals}

    @override
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "config": self.config}

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.capture.detach()
        self.capture.take()

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.capture.detach()
        self.capture.take()
