"""The hidden-state measuring unit: the measures of the watched layers' rows, configured once.

A measure of hidden states is a function of one layer's rows, and of their labels where it reads them: a
:class:`RowMeasure` (RankMe, ILDR, the linear probe, a user's own). In the manner of a torchmetrics metric, a
:class:`HiddenStateUnit` is configured once (the layers, the token selector, the labels, how many rows, its measures),
fed one batch at a time (:meth:`~HiddenStateUnit.update`: with forward hooks attached, the batch the next forward pass
runs on; from a framework that returns its hidden states, the batch and those states), :meth:`~HiddenStateUnit.compute`
reads the rows it kept into one value per measure and layer (a pure read: called twice, it gives the same values), and
:meth:`~HiddenStateUnit.reset` drops them. Attaching and removing the hooks is the driver's: the Lightning monitors
(:class:`~capgeo_callbacks.RankMeMonitor`, :class:`~capgeo_callbacks.LinearProbeMonitor`), the Hugging Face callback
and offline analysis drive the same units; they differ only in where the batches come from, so a value measured
offline equals the live one by construction.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
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
from capgeo_callbacks.keys import ILDR, PROBE_ACC, RANKME
from capgeo_callbacks.measures.ildr import ildr
from capgeo_callbacks.measures.probes import held_out_probe_accuracy
from capgeo_callbacks.measures.rankme import rankme

__all__ = ["DEFAULT_NUM_ROWS", "ILDR_ROWS", "Computed", "HiddenStateUnit", "ProbeUnit", "RankMeUnit", "RowMeasure",
           "probe_rows_measure", "rankme_rows_measure"]

DEFAULT_NUM_ROWS = 2048  # rows per layer when none is set: the first 2048 the batches give, or all they have

WarnFn = Callable[[str, str], Any]
RowFn = Callable[[Tensor, Tensor | None], float]
"""``fn(rows, labels) -> value``: one layer's value from its rows (N, D) and, for a measure that reads them, their
labels (N,)."""
Gather = Callable[[Tensor], Tensor]
"""``gather(block) -> rows``: every rank's row blocks, in rank order (a collective: called on every rank)."""


def _silent(key: str, message: str) -> None:
    return None


@dataclass(frozen=True)
class RowMeasure:
    """A measure of one layer's rows: the one way a hidden-state measure is defined (docs/design.md, "Measures").

    Attributes:
        prefix: its tag prefix, without ``/``: it logs ``<prefix>/<layer>``.
        fn: ``fn(rows, labels) -> value``, on the rows (N, D, float32) and, where ``labels``, their labels (N,); a
            ``ValueError`` or ``RuntimeError`` (rows it cannot measure) is said once per layer and skipped.
        labels: whether it reads a label per row (the unit's: a probe's targets, ILDR's classes). Beside a measure
            that reads none, rows without labels are kept: this one is then left out, noted for the run's summary
            (``measures_left_out``) rather than warned.
        min_rows: fewer rows than this are not measured.
        name: how messages name it (default: the prefix).
        undefined: where it is not defined (its value NaN), why, said once per layer; empty: a NaN is recorded as
            any value is (a non-finite value is said and skipped there).
    """

    prefix: str
    fn: RowFn
    labels: bool = False
    min_rows: int = 2
    name: str = ""
    undefined: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str) or not self.prefix or "/" in self.prefix:
            raise ValueError(f"prefix must be a non-empty tag prefix without '/', got {self.prefix!r}")
        if not callable(self.fn):
            raise ValueError(f"{self.prefix}: fn must be callable (rows, labels) -> value, got {self.fn!r}")
        if isinstance(self.min_rows, bool) or not isinstance(self.min_rows, int) or self.min_rows < 1:
            raise ValueError(f"min_rows must be an integer >= 1, got {self.min_rows!r}")
        object.__setattr__(self, "name", self.name or self.prefix)

    def value(self, layer: str, rows: Tensor, labels: Tensor | None, step: int | None) -> float | None:
        """Its value on one layer's rows (``layer`` and ``step`` name them in what is said; None: no value)."""
        return self.fn(rows, labels)


def _rankme(rows: Tensor, labels: Tensor | None, eps: float) -> float:
    return rankme(rows, eps=eps)


def _ildr(rows: Tensor, labels: Tensor | None) -> float:
    return ildr(rows, labels)


def _probe(rows: Tensor, labels: Tensor | None, ridge: float) -> float:
    return held_out_probe_accuracy(rows, labels, ridge=ridge)


def rankme_rows_measure(eps: float = 1e-7, prefix: str = RANKME[:-1]) -> RowMeasure:
    """RankMe of a layer's rows (:func:`~capgeo_callbacks.measures.rankme`; docs/design.md, "RankMe")."""
    return RowMeasure(prefix, partial(_rankme, eps=eps), name="RankMe")


ILDR_ROWS = RowMeasure(
    ILDR[:-1], _ildr, labels=True, name="ILDR",
    undefined="ILDR is undefined on these rows (non-finite rows, fewer than two classes of two rows or more, or no "
              "spread within the classes)")
"""ILDR of a layer's rows classed by their targets (:func:`~capgeo_callbacks.measures.ildr.ildr`; docs/design.md,
"ILDR"): measured on the rows another measure reads (RankMe's), and left out where a row has no target."""


def probe_rows_measure(ridge: float = 1e-3, prefix: str = PROBE_ACC[:-1]) -> RowMeasure:
    """Held-out accuracy of a linear probe from a layer's rows to their labels
    (:func:`~capgeo_callbacks.measures.probes.held_out_probe_accuracy`)."""
    return RowMeasure(prefix, partial(_probe, ridge=ridge), labels=True, min_rows=4, name="probe")


@dataclass
class Computed:
    """What a unit computed at the end of an evaluation.

    Attributes:
        values: one value per measure and layer, by tag (``<prefix>/<layer>``), each measure's layers in depth order.
        rows: the rows each tag was measured on (RankMe is only comparable at equal N).
    """

    values: dict[str, float] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)


class HiddenStateUnit:
    """The measures of the watched layers' rows (module docstring).

    Args:
        selector: token rows (:func:`~capgeo_callbacks.capture.selectors.select_rows`); None: what the first batch
            supports (:func:`~capgeo_callbacks.capture.selectors.default_selector`, chosen by :meth:`choose_selector`).
        num_rows: rows kept per layer: the first ones seen, so an unshuffled probe set gives the same rows each time.
            None: :data:`DEFAULT_NUM_ROWS`, and fewer rows than that are measured without a word (fewer than a
            number given are said once).
        measures: the :class:`RowMeasure` of these rows, in the order their tags are given.
        mask_key: batch key of the answer mask, for the answer selectors.
        labels_fn: ``labels_fn(batch)`` gives one integer label per selected row, kept beside the rows, for the
            measures that read labels.
        warn: ``warn(key, message)``, where problems are reported once (default: nowhere).
        min_rows: fewer rows than this are not measured (default: the most any measure needs).

    Raises:
        ValueError: on a bad argument.
    """

    def __init__(self, selector: Selector | None, num_rows: int | None, *, measures: Sequence[RowMeasure],
                 mask_key: str = "answer_mask", labels_fn: LabelsFn | None = None, warn: WarnFn | None = None,
                 min_rows: int | None = None) -> None:
        measures = tuple(measures)
        if not measures or not all(isinstance(m, RowMeasure) for m in measures):
            raise ValueError(f"measures must be one RowMeasure or more, got {measures!r}")
        if len({m.prefix for m in measures}) < len(measures):
            raise ValueError(f"the measures' prefixes must differ, got {[m.prefix for m in measures]}")
        self.measures = measures
        self.min_rows = max(m.min_rows for m in measures) if min_rows is None else min_rows
        if isinstance(self.min_rows, bool) or not isinstance(self.min_rows, int) or self.min_rows < 1:
            raise ValueError(f"min_rows must be an integer >= 1, got {min_rows!r}")
        if selector is not None:  # None: chosen from the first batch
            validate_selector(selector)
        self.rows_given = num_rows is not None
        num_rows = DEFAULT_NUM_ROWS if num_rows is None else num_rows
        if isinstance(num_rows, bool) or not isinstance(num_rows, int) or num_rows < self.min_rows:
            raise ValueError(f"num_rows must be an integer >= {self.min_rows}, got {num_rows!r}")
        if labels_fn is not None and not callable(labels_fn):
            raise ValueError(f"labels_fn must be callable batch -> labels, got {type(labels_fn).__name__}")
        self.selector, self.num_rows, self.mask_key = selector, num_rows, mask_key
        self.warn: WarnFn = warn if warn is not None else _silent
        self.layers: dict[str, str] = {}  # watched layer -> its name in tags, in depth order
        # rows without labels are kept where a measure reads none of them (RankMe beside ILDR)
        optional = any(not m.labels for m in measures)
        self.capture = HiddenStateCapture(selector, num_rows, mask_key, labels_fn, warn=self._report,
                                          labels_optional=optional and labels_fn is not None)
        # measures of these rows left out for lack of their labels, by tag prefix, with why: a note for the run's
        # summary (``measures_left_out``), not a warning, where the user did not ask for the measure by name
        self.left_out: dict[str, str] = {}

    def _report(self, key: str, message: str) -> Any:
        return self.warn(key, message)  # looked up at each call: the owner may redirect ``warn``

    @property
    def prefix(self) -> str:
        """The first measure's tag prefix: the unit's name (the summary's selector, the budget's work)."""
        return self.measures[0].prefix

    @property
    def prefixes(self) -> list[str]:
        return [m.prefix for m in self.measures]

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
        """Every measure's tags, each measure's layers in layer order."""
        return [f"{m.prefix}/{label}" for m in self.measures for label in self.layers.values()]

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
        rows of the batch given to :meth:`update` before it. The driver removes them (:meth:`detach`)."""
        modules = dict(model.named_modules())
        self.capture.attach({name: modules[name] for name in self.layers})

    def start(self) -> None:
        """Start with no rows, without hooks: the hidden states come through :meth:`update`."""
        self.capture.start(list(self.layers))

    def detach(self) -> None:
        """Remove the hooks (the rows kept so far stay until :meth:`reset`)."""
        self.capture.detach()

    def update(self, batch: Any, hidden: Mapping[str, Tensor] | None = None) -> None:
        """One batch: with hooks attached, the batch the next forward pass runs on (``None``: keep nothing from it);
        with ``hidden``, that batch's hidden states by watched layer (a framework that returns them). A unit given
        no selector chooses it from the first batch."""
        if batch is not None:
            self.choose_selector(batch)
        self.capture.set_batch(batch)
        if hidden:
            with self.capture.timing():  # the owner's clock, as the hooks' work is
                for name, states in hidden.items():
                    if name in self.layers:
                        self.capture.add(name, states)

    def reset(self) -> None:
        """Remove the hooks and drop every row kept."""
        self.capture.detach()
        self.capture.clear()

    def compute(self, step: int | None = None, gather: Gather | None = None) -> Computed:
        """Each measure's value on each watched layer's rows kept so far, a read of them (they stay until
        :meth:`reset`): layers with too few rows are skipped with a warning, and so are values that cannot be
        computed.

        Args:
            step: the step measured at, for the warnings.
            gather: joins every rank's rows (under DDP a collective, called once per layer in layer order on every
                rank); default: this process's rows.
        """
        unlabelled = self.capture.unlabelled  # said once already: no second word about the empty layers
        captured = self.capture.rows()
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
            for measure in self.measures:
                value = self._value(measure, name, rows, labels, step)
                if value is not None:
                    tag = f"{measure.prefix}/{label}"
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

    def _value(self, measure: RowMeasure, layer: str, rows: Tensor, labels: Tensor | None, step: int | None
               ) -> float | None:
        """One measure's value on one layer's rows, or None (said once, or noted where its labels are missing)."""
        at = "" if step is None else f" at step {step}"
        if measure.labels and (labels is None or labels.shape[0] != rows.shape[0]
                               or bool((labels == IGNORE_INDEX).any())):
            others = " and ".join(m.name for m in self.measures if not m.labels)
            if others:  # beside a measure that reads no labels: a note, not a warning (the rows were measured)
                reason = self.capture.unlabelled_reason or "rows without a target"
                self.left_out.setdefault(measure.prefix, f"{measure.name} needs the target of every row {others} "
                                         f"reads ({reason}); {others} was measured without it")
            return None  # otherwise the batches' unreadable labels were said when they were read
        try:
            value = measure.value(layer, rows, None if not measure.labels else labels, step)
        except (ValueError, RuntimeError) as err:  # rows that are not finite, a singular system
            self.warn(f"value:{layer}", f"{layer!r}{at}: {err}; skipped")
            return None
        if value is not None and measure.undefined and not math.isfinite(value):
            self.warn(f"{measure.prefix}:{layer}", f"{layer!r}{at}: {measure.undefined}; skipped")
            return None
        return value


class RankMeUnit(HiddenStateUnit):
    r"""RankMe of each watched layer's rows (:func:`~capgeo_callbacks.measures.rankme`; docs/design.md, "RankMe"),
    and ILDR of the same rows (:data:`ILDR_ROWS`), classed by the batch's target at each row
    (:func:`~capgeo_callbacks.capture.selectors.row_targets`). Rows whose batches hold no targets are measured by
    RankMe alone; ILDR is then left out without a warning (the user asked for RankMe), noted once in
    :attr:`left_out` for the run's summary.

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
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            raise ValueError(f"eps must be a positive number, got {eps!r}")
        if ildr_prefix is not None and (not isinstance(ildr_prefix, str) or not ildr_prefix or "/" in ildr_prefix
                                        or ildr_prefix == prefix):
            raise ValueError(f"ildr_prefix must be None or a tag prefix without '/' other than {prefix!r}, "
                             f"got {ildr_prefix!r}")
        self.eps, self.ildr_prefix = float(eps), ildr_prefix
        measures = [rankme_rows_measure(self.eps, prefix)]
        measures += [] if ildr_prefix is None else [replace(ILDR_ROWS, prefix=ildr_prefix)]
        super().__init__(selector, num_rows, measures=measures, mask_key=mask_key, warn=warn,
                         labels_fn=None if ildr_prefix is None else self.row_targets)

    def row_targets(self, batch: Any) -> Tensor:
        """The target of each row the selector takes: ILDR's classes."""
        return row_targets(batch, self.choose_selector(batch), self.mask_key)

    @property
    def config(self) -> dict[str, Any]:
        return {**super().config, "eps": self.eps, "ildr_prefix": self.ildr_prefix}


class ProbeUnit(HiddenStateUnit):
    """Held-out accuracy of a linear probe from each watched layer's rows to their labels
    (:func:`probe_rows_measure`; docs/design.md, "Probe labels").

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
                 prefix: str = PROBE_ACC[:-1], warn: WarnFn | None = None) -> None:
        if labels_fn is not None and not callable(labels_fn):
            raise ValueError(f"labels_fn must be callable batch -> labels, got {type(labels_fn).__name__}")
        if labels_fn is None and selector not in ("target", "answer"):
            raise ValueError(f"selector {selector!r} needs labels_fn=lambda batch: ... (one label per selected row); "
                             "only selectors 'target' and 'answer' find their labels in the batch")
        if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or not ridge >= 0:
            raise ValueError(f"ridge must be a non-negative number, got {ridge!r}")
        self.target_key, self.ridge, self.labels_fn = target_key, float(ridge), labels_fn
        found = self.answer_labels if selector == "answer" else self.target_labels
        super().__init__(selector, num_rows, measures=[probe_rows_measure(self.ridge, prefix)], mask_key=mask_key,
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
