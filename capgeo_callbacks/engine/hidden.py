"""The measures of hidden states: a :class:`~capgeo_callbacks.capture.unit.HiddenStateUnit` with its series.

A :class:`HiddenStateMeasure` is configured once (the layers, the rows, its :class:`~capgeo_callbacks.RowMeasure`),
fed by whatever drives it (Lightning's validation pass through forward hooks, the Hugging Face callback's pass over
its probe rows, offline analysis), and concluded at the end of each evaluation it measures at (:meth:`conclude`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from capgeo_callbacks.capture.hooks import LabelsFn
from capgeo_callbacks.capture.layers import describe_blocks
from capgeo_callbacks.capture.selectors import Selector
from capgeo_callbacks.capture.unit import Gather, HiddenStateUnit, RowMeasure
from capgeo_callbacks.engine.distributed import gather_rows
from capgeo_callbacks.engine.measure import Measure
from capgeo_callbacks.run.budget import OverheadBudget

__all__ = ["HiddenStateMeasure", "gather_on"]


class HiddenStateMeasure(Measure):
    """The measures of the watched layers' rows, with their series (module docstring).

    A measure of one's own is a :class:`~capgeo_callbacks.RowMeasure`, a function of one layer's rows (and their
    labels): a subclass names it in :attr:`row_measures`, or it is passed as ``measures``.

    Args:
        layers: module names or globs over ``model.named_modules()``; None: the transformer's blocks and final norm,
            found by :meth:`watch` (:func:`~capgeo_callbacks.capture.layers.find_blocks`) and said once in the log.
        selector: token rows (docs/design.md, "RankMe rows"); None: what the first batch supports, said once.
        num_rows: rows per layer (None: the first 2048 the batches give, or all they have).
        every_n_evals: measure at every n-th evaluation.
        mask_key: batch key of the answer mask, for the answer selectors.
        prefix: tag prefix, without ``/``, of a single row measure (default: its own).
        labels_fn: ``labels_fn(batch)``: one integer label per selected row, for the measures that read labels.
        measures: the row measures (default: the class's :attr:`row_measures`).
        unit: the measuring unit itself (then ``selector`` to ``measures`` are its own, not these).

    Raises:
        ValueError: on a bad argument, or in :meth:`watch` if a layer pattern matches no module or, with no
            ``layers``, if no stack of blocks is found.
    """

    row_measures: ClassVar[tuple[RowMeasure, ...]] = ()

    def __init__(self, layers: str | Sequence[str] | None, selector: Selector | None = None,
                 num_rows: int | None = None, every_n_evals: int = 1, mask_key: str = "answer_mask",
                 prefix: str | None = None, labels_fn: LabelsFn | None = None, *,
                 measures: Sequence[RowMeasure] | None = None, unit: HiddenStateUnit | None = None) -> None:
        super().__init__(every_n_evals)
        patterns = None if layers is None else [layers] if isinstance(layers, str) else list(layers)
        if patterns is not None and (not patterns or not all(isinstance(p, str) and p for p in patterns)):
            raise ValueError(f"layers must be module names or globs (non-empty strings), got {layers!r}")
        self.layer_patterns: list[str] | None = patterns  # None: the blocks find_blocks finds in watch()
        self._said_layers = False
        if unit is None:
            measures = tuple(self.row_measures if measures is None else measures)
            if not measures:
                raise ValueError(f"{type(self).__name__} needs measures=[RowMeasure(...)] (or a subclass naming its "
                                 "row_measures): what to compute from each layer's rows")
            if prefix is not None:
                if len(measures) != 1:
                    raise ValueError(f"prefix names a single row measure's tags; these are {len(measures)}")
                measures = (RowMeasure(prefix, measures[0].fn, measures[0].labels, measures[0].min_rows,
                                       measures[0].name, measures[0].undefined),)
            unit = HiddenStateUnit(selector, num_rows, measures=measures, mask_key=mask_key, labels_fn=labels_fn)
        self.unit = unit
        self.unit.warn = self.warn_once

    # the unit's configuration, read through
    prefix = property(lambda self: self.unit.prefix)
    prefixes = property(lambda self: self.unit.prefixes)
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

    def watch(self, model: nn.Module) -> None:
        self.unit.watch_modules(model, self.layer_patterns)  # raises: configuration error, naming what to pass
        if self.layer_patterns is None and not self._said_layers:
            self._said_layers = True
            rank_zero_info(f"{type(self).__name__} watches {describe_blocks(self.layer_names)}: found in "
                           f"{type(model).__name__}; pass layers=[...] to choose")

    def use_budget(self, budget: OverheadBudget | None, rule_input: bool = False) -> None:
        super().use_budget(budget, rule_input)
        self.unit.capture.timing = self.timed  # the forward hooks' work too

    def feed(self, batch: Any) -> None:
        """One batch of the pass the hooks ride on (``None``: keep nothing from it); a unit given no selector chooses
        it from the first batch and says so once."""
        if self.unit.selector is None and batch is not None:
            rank_zero_info(f"{type(self).__name__} reads the rows {self.unit.choose_selector(batch)!r} (what the "
                           "validation batches hold); pass selector=... to choose")
        with self.timed():
            self.unit.update(batch)

    def conclude(self, step: int, gather: Gather | None = None) -> dict[str, float]:
        """The evaluation's values by tag (not yet recorded: the driver records and logs them), from the rows kept
        (``gather``: every rank's, a collective), which are then dropped."""
        with self.timed():
            computed = self.unit.compute(step, gather)
            self.unit.reset()
            self.rows.update(computed.rows)
            return computed.values

    @property
    def config(self) -> dict[str, Any]:
        """How this measure measures: what offline analysis reads to measure the same layers and rows again."""
        return {"layers": list(self.layer_patterns or self.layer_names), **self.unit.config,
                "every_n_evals": self.every_n_evals}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "config": self.config}


def gather_on(device: Any) -> Gather:
    """Every rank's row blocks, moved to ``device`` first (a collective: every rank, every layer, in order)."""

    def gather(block: Tensor) -> Tensor:
        return gather_rows(block.to(device))

    return gather
