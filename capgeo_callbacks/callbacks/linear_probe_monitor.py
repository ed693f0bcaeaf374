r"""Linear probe monitor
====================

Held-out accuracy of a linear probe from each watched layer's hidden states to the correct answer token
(spec §6.6), measured on the validation pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor, nn
from typing_extensions import override

from capgeo_callbacks.callbacks.rankme_monitor import DEFAULT_LAYERS, RankMeMonitor, _rows
from capgeo_callbacks.distributed import gather_rows
from capgeo_callbacks.measures.probes import linear_probe_accuracy
from capgeo_callbacks.selectors import Selector

LabelsFn = Callable[[Any], Tensor]
"""``labels_fn(batch) -> Tensor``: one integer label per row the selector picks from ``batch``."""


class LinearProbeMonitor(RankMeMonitor):
    r"""Log, per watched layer, the held-out accuracy of a linear probe from hidden states to labels.

    Rows are captured exactly as by :class:`~capgeo_callbacks.RankMeMonitor` (forward hooks on the
    validation pass, no extra forward; the first ``num_rows`` selected rows of the unshuffled
    validation set, identical at every evaluation; under DDP rows and labels of all ranks are gathered
    before fitting, in rank order). The label of a row is the correct answer token at that position,
    ``batch[target_key][batch[mask_key]]``, or ``labels_fn(batch)`` for other models. The probe is
    closed-form ridge regression to one-hot labels on standardised features
    (:func:`~capgeo_callbacks.measures.probes.linear_probe_accuracy`), fit on the first half of the
    rows and scored on the second half: deterministic, no optimiser, no RNG.

    Args:
        layers: module names or globs over ``pl_module.named_modules()`` (as for ``RankMeMonitor``).
        num_rows: rows per layer (half fit, half scored).
        every_n_evals: measure at every n-th validation.
        mask_key: batch key of the answer mask (the ``"answer"`` selector and its labels).
        target_key: batch key of the targets whose masked entries are the labels.
        ridge: the probe's L2 penalty on standardised features.
        selector: token rows: ``"answer"`` (default), ``"last"``, ``"mean"``, ``"all"`` or a callable
            ``(hidden, batch) -> rows``; every selector but ``"answer"`` needs ``labels_fn``.
        labels_fn: ``labels_fn(batch) -> Tensor`` of integer labels, one per selected row (e.g.
            ``lambda batch: batch[1]`` for ``(x, y)`` batches with ``selector="mean"``).
        prefix: tag prefix.

    Raises:
        ValueError: on a bad argument (a selector other than ``"answer"`` without ``labels_fn``), or in
            ``setup`` if a layer pattern matches no module (the message lists the closest names).

    Logged keys:
        ``probe_acc/<layer>`` for each watched layer, with ``<layer>`` shortened as by ``RankMeMonitor``
        (``model.blocks.0`` -> ``blocks.0``).

    Example::

        probes = LinearProbeMonitor(layers="encoder.layers.*", selector="mean", labels_fn=lambda b: b[1])
        trainer = Trainer(callbacks=[probes])
    """

    def __init__(
        self,
        layers: str | Sequence[str] = DEFAULT_LAYERS,
        num_rows: int = 2048,
        every_n_evals: int = 1,
        mask_key: str = "answer_mask",
        target_key: str = "targets",
        ridge: float = 1e-3,
        selector: Selector = "answer",
        labels_fn: LabelsFn | None = None,
        prefix: str = "probe_acc",
    ) -> None:
        super().__init__(layers=layers, selector=selector, num_rows=num_rows, every_n_evals=every_n_evals,
                         mask_key=mask_key, prefix=prefix)
        if num_rows < 4:
            raise ValueError(f"num_rows must be at least 4 (half to fit, half to score), got {num_rows}")
        if not ridge >= 0:
            raise ValueError(f"ridge must be non-negative, got {ridge}")
        if labels_fn is not None and not callable(labels_fn):
            raise ValueError(f"labels_fn must be callable batch -> labels, got {type(labels_fn).__name__}")
        if labels_fn is None and selector != "answer":
            raise ValueError(f"selector {selector!r} needs labels_fn=lambda batch: ... (one label per "
                             f"selected row); only selector 'answer' takes its labels from "
                             f"batch[{target_key!r}]")
        self.target_key = target_key
        self.ridge = float(ridge)
        self.labels_fn = labels_fn
        self.probe_rows: dict[str, int] = {}  # not ``rows_used``, which the summary reads as RankMe's N
        self._labels: dict[str, list[Tensor]] = {}
        self._batch_labels: Tensor | None = None

    # -- labels beside the captured rows ------------------------------------------------------------
    def _labels_of(self, batch: Any) -> Tensor:
        if self.labels_fn is not None:
            labels = self.labels_fn(batch)
        else:
            if not isinstance(batch, Mapping) or self.target_key not in batch or self.mask_key not in batch:
                keys = sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__
                raise ValueError(f"answer labels need batch[{self.target_key!r}] and "
                                 f"batch[{self.mask_key!r}], but the batch has {keys}; pass "
                                 "labels_fn=lambda batch: ...")
            targets, mask = batch[self.target_key], batch[self.mask_key].to(dtype=torch.bool)
            if targets.shape != mask.shape:
                raise ValueError(f"{self.target_key} has shape {tuple(targets.shape)}, {self.mask_key} "
                                 f"{tuple(mask.shape)}")
            labels = targets[mask]
        if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.dtype.is_floating_point:
            raise ValueError("labels must be a 1-D integer tensor, one label per selected row, got "
                             f"{type(labels).__name__} of shape {tuple(getattr(labels, 'shape', ()))}")
        return labels.detach()

    @override
    def _hook(self, name: str):  # noqa: ANN202 - returns a torch hook
        capture = super()._hook(name)

        def hook(module: nn.Module, args: Any, output: Any) -> None:
            before, blocks = self._counts[name], len(self._rows[name])
            capture(module, args, output)
            added = self._counts[name] - before
            if not added:
                return
            labels = self._batch_labels
            truncated = added == self.num_rows - before
            count = 0 if labels is None else labels.shape[0]
            if count < added or (count != added and not truncated):
                del self._rows[name][blocks:]
                self._counts[name] = before
                self.warn_once(f"labels:{name}", f"LinearProbeMonitor: {count} labels for {added} rows of "
                               f"layer {name!r}; labels_fn must give one label per selected row. Batch "
                               "skipped")
                return
            assert labels is not None
            self._labels[name].append(labels[:added].to(torch.long, copy=True))

        return hook

    @override
    def _attach(self, pl_module: pl.LightningModule) -> None:
        super()._attach(pl_module)
        self._labels = {name: [] for name in self.layer_names}

    @override
    def _detach(self) -> None:
        super()._detach()
        self._labels, self._batch_labels = {}, None

    @override
    def on_validation_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        super().on_validation_batch_start(trainer, pl_module, batch, batch_idx, dataloader_idx)
        if not self._measuring or self._batch is None:
            return
        try:
            self._batch_labels = self._labels_of(batch)
        except ValueError as err:
            self.warn_once("labels", f"LinearProbeMonitor: {err}; batch skipped")
            self._batch, self._batch_labels = None, None

    # -- the probes --------------------------------------------------------------------------------
    @override
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        measuring = self._measuring
        captured, labels = self._rows, self._labels
        self._detach()
        self._rows, self._counts, self._labels = {}, {}, {}
        self.evaluations += 1
        if not measuring:
            return
        step = trainer.global_step
        values: dict[str, float] = {}
        for name in self.layer_names:  # same order on every rank: gather_rows is a collective
            blocks, label_blocks = captured.get(name, []), labels.get(name, [])
            local_x = torch.cat(blocks) if blocks else torch.zeros(0, 0)
            local_y = torch.cat(label_blocks)[:, None] if label_blocks else torch.zeros(0, 1).long()
            x = gather_rows(local_x.to(pl_module.device))[: self.num_rows]
            y = gather_rows(local_y.to(pl_module.device))[: self.num_rows, 0]
            if x.shape[0] < 4:
                self.warn_once(f"empty:{name}", f"LinearProbeMonitor: {_rows(x.shape[0])} captured for "
                               f"{name!r}, fewer than 4; skipped")
                continue
            if x.shape[0] < self.num_rows:
                self.warn_once(f"few:{name}", f"LinearProbeMonitor: {name!r} gave {x.shape[0]} rows, fewer "
                               f"than num_rows={self.num_rows}; the probe is fit and scored on {x.shape[0]} "
                               "rows")
            half = x.shape[0] // 2
            try:
                values[f"{self.prefix}/{self.layer_tags[name]}"] = linear_probe_accuracy(
                    x[:half], y[:half], x[half:], y[half:], ridge=self.ridge)
            except (ValueError, RuntimeError) as err:  # non-finite hidden states, a singular system
                self.warn_once(f"value:{name}", f"LinearProbeMonitor: {name!r} at step {step}: {err}; "
                               "skipped")
                continue
            self.probe_rows[self.layer_tags[name]] = int(x.shape[0])
        self.record(pl_module, step, values)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "probe_rows": dict(self.probe_rows)}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.probe_rows = dict(state_dict.get("probe_rows", {}))
