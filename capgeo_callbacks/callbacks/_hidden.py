"""Glue shared by the hidden-state monitors (RankMe, probes): resolving the watched layers, running a
:class:`~capgeo_callbacks.capture.hooks.HiddenStateCapture` over the validation pass, gathering rows under DDP."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor
from typing_extensions import override

from capgeo_callbacks.callbacks.base import MeasureCallback
from capgeo_callbacks.callbacks.distributed import gather_rows
from capgeo_callbacks.capture.hooks import HiddenStateCapture, LabelsFn
from capgeo_callbacks.capture.layers import resolve_layers, short_names
from capgeo_callbacks.capture.measuring import usable_rows
from capgeo_callbacks.capture.selectors import Selector, selector_name, validate_selector
from capgeo_callbacks.run.failures import check_positive_int, never_fails


class HiddenStateMonitor(MeasureCallback):
    """Base of the monitors that measure captured hidden-state rows at the end of a validation pass.

    Subclasses implement :meth:`measure_rows` (rows and labels of one layer -> value or None).
    """

    min_rows = 2

    def __init__(self, layers: str | Sequence[str], selector: Selector, num_rows: int, every_n_evals: int,
                 mask_key: str, prefix: str, labels_fn: LabelsFn | None = None) -> None:
        super().__init__(every_n_evals)
        validate_selector(selector)
        check_positive_int("num_rows", num_rows, self.min_rows)
        patterns = [layers] if isinstance(layers, str) else list(layers)
        if not patterns or not all(isinstance(p, str) and p for p in patterns):
            raise ValueError(f"layers must be module names or globs (non-empty strings), got {layers!r}")
        if not isinstance(prefix, str) or not prefix or "/" in prefix:
            raise ValueError(f"prefix must be a non-empty tag prefix without '/', got {prefix!r}")
        self.layer_patterns = patterns
        self.selector = selector
        self.num_rows = num_rows
        self.mask_key = mask_key
        self._prefix = prefix
        self.layer_names: list[str] = []
        self.layer_tags: dict[str, str] = {}
        self.capture = HiddenStateCapture(selector, num_rows, mask_key, labels_fn, warn=self.warn_once)

    @property
    def prefix(self) -> str:
        return self._prefix

    @property
    def selector_name(self) -> str:
        return selector_name(self.selector)

    @cached_property  # Lightning reads it at every hook call (its profiler's name): formatted once
    def state_key(self) -> str:  # type: ignore[override]
        return self._generate_state_key(layers=self.layer_patterns, prefix=self.prefix)

    @property
    def tags(self) -> list[str]:
        """The logged tags, in layer (depth) order."""
        return [f"{self.prefix}/{self.layer_tags[name]}" for name in self.layer_names]

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
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
            if not usable_rows(name, count, self.min_rows, self.num_rows, self.warn_once):
                continue
            value = self.measure_rows(name, rows, labels, step)
            if value is not None:
                values[tag] = value
                self.rows[tag] = int(count)
        self.record(trainer, step, values)

    @property
    def config(self) -> dict[str, Any]:
        """How this monitor measures: what offline analysis reads to measure the same layers and rows again."""
        return {"layers": list(self.layer_patterns), "selector": self.selector_name, "num_rows": self.num_rows,
                "prefix": self.prefix, "mask_key": self.mask_key, "every_n_evals": self.every_n_evals}

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
