"""The hidden-state measuring unit: one measure of the watched layers' hidden states, configured once.

In the manner of a torchmetrics metric: a :class:`HiddenStateUnit` is configured once (the layers, the token
selector, the labels, how many rows, the fewest it measures), fed one batch at a time (:meth:`~HiddenStateUnit.update`:
with forward hooks attached, the batch the next forward pass runs on; from a framework that returns its hidden states,
the batch and those states), then :meth:`~HiddenStateUnit.compute` turns the rows it kept into one value per layer,
and :meth:`~HiddenStateUnit.reset` drops them. The Lightning monitors (:class:`~capgeo_callbacks.RankMeMonitor`,
:class:`~capgeo_callbacks.LinearProbeMonitor`), the Hugging Face callback and offline analysis drive the same units;
they differ only in where the batches come from, so a value measured offline equals the live one by construction.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from capgeo_callbacks.capture.batches import IGNORE_INDEX, answer_labels, target_labels
from capgeo_callbacks.capture.hooks import HiddenStateCapture, LabelsFn
from capgeo_callbacks.capture.layers import find_blocks, resolve_layers, short_names
from capgeo_callbacks.capture.selectors import (
    Selector,
    default_selector,
    row_targets,
    selector_name,
    validate_selector,
)
from capgeo_callbacks.keys import ILDR, RANKME
from capgeo_callbacks.measures.ildr import ildr
from capgeo_callbacks.measures.probes import held_out_probe_accuracy
from capgeo_callbacks.measures.rankme import rankme

__all__ = ["DEFAULT_NUM_ROWS", "Computed", "HiddenStateUnit", "MeasureFn", "ProbeUnit", "RankMeUnit"]

DEFAULT_NUM_ROWS = 2048  # rows per layer when none is set: the first 2048 the batches give, or all they have

WarnFn = Callable[[str, str], Any]
MeasureFn = Callable[[str, Tensor, Tensor | None, int | None], float | None]
"""``measure(layer, rows, labels, step) -> value``: one layer's value from its rows (N, D) and labels (N,) or None."""
Gather = Callable[[Tensor], Tensor]
"""``gather(block) -> rows``: every rank's row blocks, in rank order (a collective: called on every rank)."""


def _silent(key: str, message: str) -> None:
    return None


@dataclass
class Computed:
    """What a unit computed at the end of an evaluation.

    Attributes:
        values: one value per measured layer, by tag (``<prefix>/<layer>``), in layer order.
        rows: the rows each tag was measured on (RankMe is only comparable at equal N).
    """

    values: dict[str, float] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)


class HiddenStateUnit:
    """One hidden-state measure of the watched layers (module docstring); subclasses say how rows become a value.

    Args:
        selector: token rows (:func:`~capgeo_callbacks.capture.selectors.select_rows`); None: what the first batch
            supports (:func:`~capgeo_callbacks.capture.selectors.default_selector`, chosen by :meth:`choose_selector`).
        num_rows: rows kept per layer: the first ones seen, so an unshuffled probe set gives the same rows each time.
            None: :data:`DEFAULT_NUM_ROWS`, and fewer rows than that are measured without a word (fewer than a
            number given are said once).
        mask_key: batch key of the answer mask, for the answer selectors.
        prefix: tag prefix, without ``/``.
        labels_fn: ``labels_fn(batch)`` gives one integer label per selected row, kept beside the rows.
        warn: ``warn(key, message)``, where problems are reported once (default: nowhere).
        measure: ``measure(layer, rows, labels, step) -> value or None``, the measure of a unit that is not one of
            capgeo's own (those implement :meth:`measure_rows`).
        min_rows: fewer rows than this are not measured (default: the class's).

    Raises:
        ValueError: on a bad argument.
    """

    min_rows: int = 2

    def __init__(self, selector: Selector | None, num_rows: int | None, *, mask_key: str = "answer_mask",
                 prefix: str, labels_fn: LabelsFn | None = None, warn: WarnFn | None = None,
                 measure: MeasureFn | None = None, min_rows: int | None = None) -> None:
        if min_rows is not None:
            if isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 1:
                raise ValueError(f"min_rows must be an integer >= 1, got {min_rows!r}")
            self.min_rows = min_rows
        if measure is not None and not callable(measure):
            raise ValueError(f"measure must be callable (layer, rows, labels, step) -> value, got {measure!r}")
        self._measure = measure
        if selector is not None:  # None: chosen from the first batch
            validate_selector(selector)
        self.rows_given = num_rows is not None
        num_rows = DEFAULT_NUM_ROWS if num_rows is None else num_rows
        if isinstance(num_rows, bool) or not isinstance(num_rows, int) or num_rows < self.min_rows:
            raise ValueError(f"num_rows must be an integer >= {self.min_rows}, got {num_rows!r}")
        if not isinstance(prefix, str) or not prefix or "/" in prefix:
            raise ValueError(f"prefix must be a non-empty tag prefix without '/', got {prefix!r}")
        self.selector, self.num_rows, self.mask_key, self.prefix = selector, num_rows, mask_key, prefix
        self.warn: WarnFn = warn if warn is not None else _silent
        self.layers: dict[str, str] = {}  # watched layer -> its name in tags, in depth order
        self.capture = HiddenStateCapture(selector, num_rows, mask_key, labels_fn, warn=self._report)
        self.unlabelled_reason: str | None = None  # at the last compute: why some rows had no label (optional labels)
        # measures of these rows left out for lack of their inputs, by tag prefix, with why: a note for the run's
        # summary (``measures_left_out``), not a warning, where the user did not ask for the measure by name
        self.left_out: dict[str, str] = {}

    def _report(self, key: str, message: str) -> Any:
        return self.warn(key, message)  # looked up at each call: the owner may redirect ``warn``

    @property
    def selector_name(self) -> str:
        return "auto" if self.selector is None else selector_name(self.selector)

    def choose_selector(self, batch: Any) -> Selector:
        """The selector, chosen from ``batch`` where none was given (what it holds: ``first_answer`` with an answer
        mask, ``target`` with targets, else ``mean``); the one given otherwise."""
        if self.selector is None:
            self.selector = self.capture.selector = default_selector(batch, self.mask_key)
        return self.selector

    @property
    def tags(self) -> list[str]:
        """The tags of the watched layers, in layer order."""
        return [f"{self.prefix}/{label}" for label in self.layers.values()]

    @property
    def config(self) -> dict[str, Any]:
        """How this unit measures (what a checkpoint records, so that offline analysis measures the same rows)."""
        selector = None if self.selector is None else self.selector_name  # None: not chosen yet
        return {"selector": selector, "num_rows": self.num_rows, "prefix": self.prefix, "mask_key": self.mask_key}

    def watch(self, layers: Sequence[str] | Mapping[str, str]) -> None:
        """The layers to measure: names (tagged without the components they all share, ``model.blocks.0`` ->
        ``blocks.0``), or ``name -> tag name``."""
        self.layers = dict(layers) if isinstance(layers, Mapping) else short_names(list(layers))

    def watch_modules(self, model: nn.Module, patterns: Sequence[str] | None) -> None:
        """Watch the modules of ``model`` that ``patterns`` (names or globs) match; None: the transformer's blocks and
        final norm (:func:`~capgeo_callbacks.capture.layers.find_blocks`).

        Raises:
            ValueError: if a pattern matches no module (the message lists the closest names), or with no patterns if
                no stack of blocks is found (the message names what was looked for).
        """
        self.watch(find_blocks(model) if patterns is None else resolve_layers(model, patterns))

    @property
    def is_attached(self) -> bool:
        return self.capture.is_attached

    @property
    def full(self) -> bool:
        """Whether every layer holds ``num_rows`` rows (the rest of a probe set can be skipped)."""
        return self.capture.full()

    def attach(self, model: nn.Module) -> None:
        """Forward hooks on the watched modules of ``model``, starting with no rows: each forward pass then keeps
        rows of the batch given to :meth:`update` before it."""
        modules = dict(model.named_modules())
        self.capture.attach({name: modules[name] for name in self.layers})

    def start(self) -> None:
        """Start with no rows, without hooks: the hidden states come through :meth:`update`."""
        self.capture.start(list(self.layers))

    def detach(self) -> None:
        """Remove the hooks (the rows kept so far stay until :meth:`compute` or :meth:`reset`)."""
        self.capture.detach()

    def update(self, batch: Any, hidden: Mapping[str, Tensor] | None = None) -> None:
        """One batch: with hooks attached, the batch the next forward pass runs on (``None``: keep nothing from it);
        with ``hidden``, that batch's hidden states by watched layer (a framework that returns them). A unit given
        no selector chooses it from the first batch."""
        if batch is not None:
            self.choose_selector(batch)
        self.capture.set_batch(batch)
        for name, states in (hidden or {}).items():
            if name in self.layers:
                self.capture.add(name, states)

    def reset(self) -> None:
        """Remove the hooks and drop every row kept."""
        self.capture.detach()
        self.capture.take()

    def compute(self, step: int | None = None, gather: Gather | None = None) -> Computed:
        """Each watched layer's value on the rows kept (the hooks removed and the rows dropped): layers with too few
        rows are skipped with a warning, and so are values that cannot be computed.

        Args:
            step: the step measured at, for the warnings.
            gather: joins every rank's rows (under DDP a collective, called once per layer in layer order on every
                rank); default: this process's rows.
        """
        self.capture.detach()
        unlabelled = self.capture.unlabelled  # said once already: no second word about the empty layers
        self.unlabelled_reason = self.capture.unlabelled_reason  # optional labels: why some rows have none
        captured = self.capture.take()
        result = Computed()
        for name, label in self.layers.items():
            rows, labels = captured.get(name, (torch.zeros(0, 0), None))
            if gather is not None:
                rows = gather(rows)
                labels = None if labels is None else gather(labels[:, None])[:, 0]
            rows = rows[: self.num_rows]
            labels = None if labels is None else labels[: self.num_rows]
            count = rows.shape[0]
            if (count < self.min_rows and unlabelled) or not self._usable(name, count):
                continue
            for prefix, value in self.measure_layer(name, rows, labels, step).items():
                if value is not None:
                    tag = f"{prefix}/{label}"
                    result.values[tag], result.rows[tag] = value, int(count)
        order = {tag: i for i, tag in enumerate(self.tags)}  # each measure's layers together, in depth order
        result.values = dict(sorted(result.values.items(), key=lambda item: order.get(item[0], len(order))))
        return result

    def _usable(self, layer: str, count: int) -> bool:
        """Whether ``count`` rows of ``layer`` can be measured (at least ``min_rows``); fewer than ``num_rows`` are
        measured with a warning, since RankMe is only comparable at equal N."""
        if count < self.min_rows:
            self.warn(f"empty:{layer}", f"{count} row{'' if count == 1 else 's'} captured for {layer!r}, fewer than "
                      f"{self.min_rows}; skipped")
            return False
        if count < self.num_rows and self.rows_given:
            self.warn(f"few:{layer}", f"{layer!r} gave {count} rows, fewer than num_rows={self.num_rows}; measured on "
                      f"{count} rows")
        return True

    def measure_layer(self, layer: str, rows: Tensor, labels: Tensor | None, step: int | None
                      ) -> dict[str, float | None]:
        """One layer's values by tag prefix: :meth:`measure_rows` under this unit's prefix (a subclass may add more
        measures of the same rows)."""
        return {self.prefix: self.measure_rows(layer, rows, labels, step)}

    def measure_rows(self, layer: str, rows: Tensor, labels: Tensor | None, step: int | None) -> float | None:
        """The value of one layer's rows (N, D) and labels (N,) or None, or None (warned) when there is none."""
        if self._measure is None:
            raise NotImplementedError(f"{type(self).__name__} needs measure=... or a measure_rows of its own")
        return self._measure(layer, rows, labels, step)

    def _failed(self, layer: str, step: int | None, err: Exception) -> None:
        self.warn(f"value:{layer}", f"{layer!r}{'' if step is None else f' at step {step}'}: {err}; skipped")


class RankMeUnit(HiddenStateUnit):
    r"""RankMe of each watched layer's rows (:func:`~capgeo_callbacks.measures.rankme`; docs/design.md, "RankMe"),
    and ILDR of the same rows, classed by the batch's target at each row
    (:func:`~capgeo_callbacks.measures.ildr.ildr`, :func:`~capgeo_callbacks.capture.selectors.row_targets`;
    docs/design.md, "ILDR"). Rows whose batches hold no targets are measured by RankMe alone; ILDR is then left out
    without a warning (the user asked for RankMe), noted once in :attr:`left_out` for the run's summary.

    Args:
        selector: token rows (None: what the first batch supports).
        num_rows: rows per layer (None: the first 2048, or all there are).
        mask_key: batch key of the answer mask.
        eps: RankMe's epsilon.
        prefix: tag prefix.
        warn: where problems are reported once.
        ildr_prefix: ILDR's tag prefix; None: no ILDR.
    """

    def __init__(self, selector: Selector | None = None, num_rows: int | None = None, *,
                 mask_key: str = "answer_mask", eps: float = 1e-7, prefix: str = RANKME[:-1],
                 warn: WarnFn | None = None, ildr_prefix: str | None = ILDR[:-1]) -> None:
        super().__init__(selector, num_rows, mask_key=mask_key, prefix=prefix, warn=warn,
                         labels_fn=None if ildr_prefix is None else self.row_targets)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            raise ValueError(f"eps must be a positive number, got {eps!r}")
        if ildr_prefix is not None and (not isinstance(ildr_prefix, str) or not ildr_prefix or "/" in ildr_prefix
                                        or ildr_prefix == prefix):
            raise ValueError(f"ildr_prefix must be None or a tag prefix without '/' other than {prefix!r}, "
                             f"got {ildr_prefix!r}")
        self.eps, self.ildr_prefix = float(eps), ildr_prefix
        self.capture.labels_optional = True  # RankMe measures rows without targets too

    def row_targets(self, batch: Any) -> Tensor:
        """The target of each row the selector takes: ILDR's classes."""
        return row_targets(batch, self.choose_selector(batch), self.mask_key)

    @property
    def tags(self) -> list[str]:
        """RankMe's tags, then ILDR's, in layer order."""
        labels = self.layers.values() if self.ildr_prefix is not None else ()
        return super().tags + [f"{self.ildr_prefix}/{label}" for label in labels]

    @property
    def config(self) -> dict[str, Any]:
        return {**super().config, "eps": self.eps, "ildr_prefix": self.ildr_prefix}

    def measure_layer(self, layer: str, rows: Tensor, labels: Tensor | None, step: int | None
                      ) -> dict[str, float | None]:
        values = super().measure_layer(layer, rows, labels, step)
        if self.ildr_prefix is not None:
            values[self.ildr_prefix] = self._ildr(layer, rows, labels, step)
        return values

    def measure_rows(self, layer: str, rows: Tensor, labels: Tensor | None, step: int | None) -> float | None:
        try:
            return rankme(rows, eps=self.eps)
        except ValueError as err:  # hidden states that are not finite
            self._failed(layer, step, err)
            return None

    def _ildr(self, layer: str, rows: Tensor, labels: Tensor | None, step: int | None) -> float | None:
        if labels is None or labels.shape[0] != rows.shape[0] or bool((labels == IGNORE_INDEX).any()):
            reason = self.unlabelled_reason or "rows without a target"
            self.left_out.setdefault(self.ildr_prefix, f"ILDR needs the target of every row RankMe reads ({reason}); "
                                     "RankMe was measured without it")
            return None
        value = ildr(rows, labels)
        if not math.isfinite(value):
            self.warn(f"ildr:{layer}", f"{layer!r}{'' if step is None else f' at step {step}'}: ILDR is undefined on "
                      "these rows (non-finite rows, fewer than two classes of two rows or more, or no spread within "
                      "the classes); skipped")
            return None
        return value


class ProbeUnit(HiddenStateUnit):
    """Held-out accuracy of a linear probe from each watched layer's rows to their labels
    (:func:`~capgeo_callbacks.measures.probes.held_out_probe_accuracy`; docs/design.md, "Probe labels").

    Labels: ``labels_fn(batch)`` if given; else, with the ``answer`` selector, the answer token at each answer
    position (:func:`~capgeo_callbacks.capture.batches.answer_labels`); else the batch's targets at the rows the
    ``target`` selector takes (:func:`~capgeo_callbacks.capture.batches.target_labels`).

    Args:
        selector: token rows: ``"target"``, ``"answer"``, or any selector with ``labels_fn``.
        num_rows: rows per layer (half fit, half scored; None: the first 2048, or all there are).
        mask_key: batch key of the answer mask.
        target_key: batch key of the targets the ``answer`` selector's labels come from.
        ridge: the probe's L2 penalty on standardised features.
        labels_fn: ``labels_fn(batch) -> Tensor`` of integer labels, one per selected row.
        prefix: tag prefix.
        warn: where problems are reported once.

    Raises:
        ValueError: on a bad argument (a selector other than ``"target"`` or ``"answer"`` without ``labels_fn``).
    """

    min_rows = 4  # half to fit, half to score

    def __init__(self, selector: Selector = "target", num_rows: int | None = None, *, mask_key: str = "answer_mask",
                 target_key: str = "targets", ridge: float = 1e-3, labels_fn: LabelsFn | None = None,
                 prefix: str = "probe_acc", warn: WarnFn | None = None) -> None:
        if labels_fn is not None and not callable(labels_fn):
            raise ValueError(f"labels_fn must be callable batch -> labels, got {type(labels_fn).__name__}")
        if labels_fn is None and selector not in ("target", "answer"):
            raise ValueError(f"selector {selector!r} needs labels_fn=lambda batch: ... (one label per selected row); "
                             "only selectors 'target' and 'answer' find their labels in the batch")
        if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or not ridge >= 0:
            raise ValueError(f"ridge must be a non-negative number, got {ridge!r}")
        self.target_key, self.ridge, self.labels_fn = target_key, float(ridge), labels_fn
        found = self.answer_labels if selector == "answer" else self.target_labels
        super().__init__(selector, num_rows, mask_key=mask_key, prefix=prefix,
                         labels_fn=labels_fn if labels_fn is not None else found, warn=warn)

    def answer_labels(self, batch: Any) -> Tensor:
        """The correct answer token at each answer position: ``batch[target_key][batch[mask_key]]``."""
        return answer_labels(batch, self.target_key, self.mask_key)

    def target_labels(self, batch: Any) -> Tensor:
        """The label of each row the ``target`` selector takes."""
        return target_labels(batch, self.mask_key)

    @property
    def config(self) -> dict[str, Any]:
        return {**super().config, "ridge": self.ridge, "target_key": self.target_key}

    def measure_rows(self, layer: str, rows: Tensor, labels: Tensor | None, step: int | None) -> float | None:
        if labels is None:
            return None
        try:
            return held_out_probe_accuracy(rows, labels, ridge=self.ridge)
        except (ValueError, RuntimeError) as err:  # hidden states that are not finite, or a singular system
            self._failed(layer, step, err)
            return None
