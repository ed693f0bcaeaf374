"""Hidden-state capture: forward hooks that keep the selected rows of each watched layer.

Hooks exist only while a capture is attached (one validation pass, or a ``with capture.attached(...)``
block offline) and are removed in ``detach``, which the callbacks also call on failure and teardown:
hooks are global state on the user's model. The hook itself never raises into the model's forward: a
problem is reported through ``warn`` and the batch is skipped for that layer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from capgeo_callbacks.capture.batches import IGNORE_INDEX
from capgeo_callbacks.capture.layers import output_tensor
from capgeo_callbacks.capture.selectors import Selector, SelectorError, row_positions, rows_at, select_rows

LabelsFn = Callable[[Any], Tensor]
"""``labels_fn(batch) -> Tensor``: one integer label per row the selector picks from ``batch``."""

WarnFn = Callable[[str, str], None]
"""``warn(key, message)``: report a problem once per key."""


class HiddenStateCapture:
    """Keeps up to ``num_rows`` selected rows (detached float32 copies) of each watched layer's output.

    Args:
        selector: token selector (see :func:`~capgeo_callbacks.capture.selectors.select_rows`).
        num_rows: rows kept per layer; the first ones seen, so an unshuffled probe set gives the same
            rows at every capture.
        mask_key: batch key of the answer mask for the answer selectors.
        labels_fn: if given, ``labels_fn(batch)`` gives one label per selected row, kept beside the rows
            (linear probes); a batch whose labels do not match its rows is skipped.
        warn: where problems are reported (default: nowhere).
        labels_optional: a batch without labels keeps its rows, labelled ``IGNORE_INDEX``, and the first reason
            is kept in :attr:`unlabelled_reason` instead of a warning (RankMe's rows, which ILDR labels).
    """

    def __init__(
        self,
        selector: Selector,
        num_rows: int,
        mask_key: str = "answer_mask",
        labels_fn: LabelsFn | None = None,
        warn: WarnFn | None = None,
        labels_optional: bool = False,
    ) -> None:
        self.selector = selector
        self.num_rows = num_rows
        self.mask_key = mask_key
        self.labels_fn = labels_fn
        self.warn: WarnFn = warn or (lambda key, message: None)
        self._handles: list[RemovableHandle] = []
        self._rows: dict[str, list[Tensor]] = {}
        self._labels: dict[str, list[Tensor]] = {}
        self._counts: dict[str, int] = {}
        self._batch: Any = None
        self._batch_labels: Tensor | None = None
        self._found: tuple[Any, tuple[Tensor, Tensor] | None] = (None, None)  # (hidden shape and device, positions)
        self.unlabelled = 0  # batches skipped since the last take() because labels_fn found no labels in them
        self.labels_optional = labels_optional
        self.unlabelled_reason: str | None = None  # with optional labels: why rows since the last take() have none
        # ``with timing():`` around each hook's work: the overhead budget's clock, when the owner has one
        self.timing: Callable[[], AbstractContextManager[Any]] = nullcontext

    @property
    def is_attached(self) -> bool:
        return bool(self._handles)

    def start(self, names: Sequence[str]) -> None:
        """Start capturing ``names`` with no rows (without hooks: rows then come through :meth:`add`)."""
        self.detach()
        self._rows = {name: [] for name in names}
        self._labels = {name: [] for name in names}
        self._counts = dict.fromkeys(names, 0)

    def attach(self, modules: Mapping[str, nn.Module]) -> None:
        """Register a forward hook on each ``name -> module`` and start with no rows."""
        self.start(list(modules))
        self._handles = [module.register_forward_hook(self._hook(name)) for name, module in modules.items()]

    def full(self) -> bool:
        """Whether every layer holds ``num_rows`` rows (the rest of a probe set can be skipped)."""
        return bool(self._counts) and all(count >= self.num_rows for count in self._counts.values())

    def detach(self) -> None:
        """Remove the hooks (the rows captured so far stay until :meth:`take`)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._batch, self._batch_labels, self._found = None, None, (None, None)

    @contextmanager
    def attached(self, modules: Mapping[str, nn.Module]) -> Iterator[HiddenStateCapture]:
        """Hooks attached for the ``with`` block, removed in ``finally``."""
        self.attach(modules)
        try:
            yield self
        finally:
            self.detach()

    def set_batch(self, batch: Any) -> None:
        """The batch the next forward pass runs on (``None``: capture nothing from it)."""
        self._batch, self._batch_labels, self._found = batch, None, (None, None)
        if batch is None or self.labels_fn is None or self.full():
            return
        try:
            labels = self.labels_fn(batch)
            if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.dtype.is_floating_point:
                raise ValueError("labels must be a 1-D integer tensor, one label per selected row, got "
                                 f"{type(labels).__name__} of shape {tuple(getattr(labels, 'shape', ()))}")
            self._batch_labels = labels.detach()
        except (ValueError, KeyError, TypeError) as err:
            if self.labels_optional:  # the rows are kept, without labels
                self.unlabelled_reason = self.unlabelled_reason or str(err)
                return
            self.warn("labels", f"{err}; pass labels_fn=lambda batch: ... (one integer label per selected row) and "
                      "selector=... (docs/reference.md, 'Probes on your batches'); the probe is left out")
            self._batch = None
            self.unlabelled += 1

    def rows(self) -> dict[str, tuple[Tensor, Tensor | None]]:
        """Per layer, the captured rows (N, D) and labels (N,) or None; a read: they stay until :meth:`clear`."""
        out: dict[str, tuple[Tensor, Tensor | None]] = {}
        for name, blocks in self._rows.items():
            rows = _joined(blocks) if blocks else torch.zeros(0, 0)
            label_blocks = self._labels.get(name, [])
            labels = _joined(label_blocks) if label_blocks else (None if self.labels_fn is None else
                                                                 torch.zeros(0, dtype=torch.long))
            out[name] = (rows, labels)
        return out

    def clear(self) -> None:
        """Drop the rows and labels captured, and what was said of them."""
        self._rows, self._labels, self._counts = {}, {}, {}
        self.unlabelled, self.unlabelled_reason = 0, None

    def take(self) -> dict[str, tuple[Tensor, Tensor | None]]:
        """Per layer, the captured rows (N, D) and labels (N,) or None; clears them."""
        out = self.rows()
        self.clear()
        return out

    def _hook(self, name: str) -> Callable[[nn.Module, Any, Any], None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            with self.timing():
                try:
                    self.add(name, output)
                except Exception as err:  # noqa: BLE001 - never break the user's forward pass
                    self.warn(f"capture:{name}", f"capturing {name!r} failed ({type(err).__name__}: {err}); skipped")

        return hook

    def add(self, name: str, output: Any) -> None:
        """Select and keep rows of one layer's output on the current batch (what the hook does)."""
        have = self._counts[name]
        if have >= self.num_rows or self._batch is None:
            return
        hidden = output_tensor(output)
        if hidden is None:
            self.warn(f"type:{name}", f"layer {name!r} returned {type(output).__name__}, not a tensor; it is skipped")
            return
        try:
            rows = self._select(hidden.detach())
        except SelectorError as err:
            self.warn("select", f"{err}; layer {name!r} is left out")
            return
        labels = self._batch_labels
        if self.labels_fn is not None and (labels is None or labels.shape[0] != rows.shape[0]):
            count = 0 if labels is None else labels.shape[0]
            if not self.labels_optional:
                self.warn(f"labels:{name}", f"{count} labels for {rows.shape[0]} rows of layer {name!r}; "
                          "labels_fn must give one label per selected row. Batch skipped")
                return
            if labels is not None:
                self.unlabelled_reason = self.unlabelled_reason or f"{count} labels for {rows.shape[0]} rows"
            labels = torch.full((rows.shape[0],), IGNORE_INDEX, dtype=torch.long)
        take = self.num_rows - have
        # the kept rows copied once: a built-in selector's gather has made a copy unless it returned a view of the
        # hidden states (a callable's rows may be any tensor it keeps: always copied)
        shared = callable(self.selector) or rows.untyped_storage().data_ptr() == hidden.untyped_storage().data_ptr()
        self._rows[name].append(rows[:take].to(torch.float32, copy=shared))
        if labels is not None:
            self._labels[name].append(labels[:take].to(device=rows.device, dtype=torch.long, copy=True))
        self._counts[name] = have + min(take, rows.shape[0])

    def _select(self, hidden: Tensor) -> Tensor:
        """The selected rows of one layer's hidden states on the current batch. Where the selector picks whole rows,
        their positions depend on the batch only: found once per batch (and shape), then gathered for each layer."""
        key = (hidden.shape[:2], hidden.device)
        if self._found[0] != key:
            self._found = (key, row_positions(hidden, self._batch, self.selector, self.mask_key))
        found = self._found[1]
        return rows_at(hidden, found) if found is not None else select_rows(hidden, self._batch, self.selector,
                                                                            self.mask_key)


def _joined(blocks: list[Tensor]) -> Tensor:
    """The blocks one after another (a single block as it is: the validation set is often one batch)."""
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks)
