"""What every measure keeps during a run, whatever drives it: its series, its rows, its cadence and its share of the
overhead budget (:class:`Measure`), and the measures read from the model at the start of an evaluation
(:class:`ModelMeasure`).

A measure class is framework-neutral: the Lightning callbacks (:mod:`capgeo_callbacks.callbacks`) add Lightning's
hooks to it, the Hugging Face callback drives the same classes from its own events, and both hand what they measure
to the run engine (:mod:`capgeo_callbacks.engine.run`).

The failure rule (:mod:`capgeo_callbacks.run.failures`): configuration errors (bad arguments, a layer pattern
that matches nothing) raise in ``__init__`` or :meth:`Measure.watch`, before the first step; anything that fails
later (a measure, a logger, a file) is reported once, as a warning, and skipped: training goes on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from torch import nn

from capgeo_callbacks.detection.series import append_point
from capgeo_callbacks.engine.distributed import broadcast_object
from capgeo_callbacks.run.budget import OPTIONAL, RULE_INPUT, OverheadBudget
from capgeo_callbacks.run.failures import WarnOnce, check_positive_int

__all__ = ["Measure", "ModelMeasure", "agree_across_ranks"]


def agree_across_ranks(runs: bool) -> bool:
    """Rank zero's decision on every rank (under DDP every rank measures or none does: the rows are gathered)."""
    return bool(broadcast_object(runs))


class Measure:
    """A measure's run-time state: ``series[tag] = [[step, value], ...]`` of what it measured (module docstring).

    The run engine reads the series (nothing else keeps a copy), and a resumed run continues them without gaps or
    duplicates. Under an overhead budget the engine hands this measure the run's
    :class:`~capgeo_callbacks.run.budget.OverheadBudget` (:meth:`use_budget`): its work is timed under :attr:`work`,
    and an evaluation its cadence selects is measured only if the budget allows it (:meth:`due`).

    Args:
        every_n_evals: measure at every n-th evaluation (1 = every one).
    """

    def __init__(self, every_n_evals: int = 1) -> None:
        check_positive_int("every_n_evals", every_n_evals)
        self.every_n_evals = every_n_evals
        self.series: dict[str, list[list[float]]] = {}
        self.rows: dict[str, int] = {}  # rows each tag was last measured on
        self.evaluations = 0
        self.warn_once = WarnOnce(type(self).__name__)
        self.budget: OverheadBudget | None = None  # the run's, from its engine (not part of the state)

    @property
    def tags(self) -> list[str]:
        """The tags this measure logs (those known before the first measurement)."""
        return []

    @property
    def selector_name(self) -> str | None:
        """The token selector the measure uses, for the summary (None: not a hidden-state measure)."""
        return None

    @property
    def prefix(self) -> str:
        return ""

    @property
    def prefixes(self) -> list[str]:
        """The tag prefixes of what it logs (``rankme`` for ``rankme/<layer>``; none for whole-model tags)."""
        return [self.prefix] if self.prefix else []

    @property
    def left_out(self) -> dict[str, str]:
        """Measures left out for lack of their inputs, by tag prefix, with why: noted in the summary
        (``measures_left_out``) rather than warned, where the user did not ask for them by name."""
        return {}

    @property
    def work(self) -> str:
        """The name of this measure's work in the overhead budget's record: its tag prefix, else its class's."""
        return self.prefix or type(self).__name__

    def owns(self, tag: str) -> bool:
        """Whether ``tag`` is one this measure logs (a resumed run's logged values go back to their measure)."""
        return tag in self.tags or any(tag.startswith(f"{prefix}/") for prefix in self.prefixes)

    def watch(self, model: nn.Module) -> None:
        """Find what to measure in ``model`` (its layers), before training; a configuration error raises."""

    def use_budget(self, budget: OverheadBudget | None, rule_input: bool = False) -> None:
        """Time this measure's work in ``budget`` and measure only where it allows (None: no budget);
        ``rule_input``: the run's rules read what it measures, so it is thinned last, to an even cadence."""
        self.budget = budget
        if budget is not None:
            budget.add_work(self.work, RULE_INPUT if rule_input else OPTIONAL)

    def timed(self) -> AbstractContextManager[Any]:
        """``with self.timed():`` charges the block to this measure's work in the budget (nothing without one)."""
        return nullcontext() if self.budget is None else self.budget.timing(self.work)

    def due(self, step: int, agree: Callable[[bool], bool] | None = agree_across_ranks) -> bool:
        """Count the evaluation now at ``step``, and whether this measure measures at it: its cadence selects it and
        the overhead budget, if any, allows it (asked once per evaluation; ``agree`` joins the processes' decisions)."""
        selected = self.evaluations % self.every_n_evals == 0
        self.evaluations += 1
        return selected and (self.budget is None or self.budget.allows(self.work, step, agree=agree))

    def add_values(self, step: int, values: Mapping[str, float]) -> dict[str, float]:
        """Append the finite ``values`` at ``step`` to the series (a non-finite one is said once and skipped); returns
        them, for the driver to log."""
        finite: dict[str, float] = {}
        for tag, value in values.items():
            if not math.isfinite(value):
                self.warn_once(tag, f"{tag}: non-finite value {value} at step {step}; skipped")
                continue
            append_point(self.series.setdefault(tag, []), step, float(value))
            finite[tag] = float(value)
        return finite

    def values_at(self, step: int) -> dict[str, float]:
        """The values measured at ``step`` (empty if this measure did not measure then)."""
        return {tag: points[-1][1] for tag, points in self.series.items() if points and points[-1][0] == step}

    def state_dict(self) -> dict[str, Any]:
        return {"series": {tag: [list(p) for p in pts] for tag, pts in self.series.items()},
                "evaluations": self.evaluations, "rows": dict(self.rows)}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.series = {tag: [list(p) for p in pts] for tag, pts in state_dict.get("series", {}).items()}
        self.evaluations = int(state_dict.get("evaluations", 0))
        rows = dict(state_dict.get("rows", {}))
        for older in ("rows_used", "probe_rows"):  # an earlier layout: per layer, without the prefix
            rows.update({f"{self.prefix}/{layer}": n for layer, n in state_dict.get(older, {}).items()})
        self.rows = rows


class ModelMeasure(Measure):
    """A measure read from the model at the start of an evaluation, on the weights that evaluation sees: its
    parameters, or passes of its own (:class:`~capgeo_callbacks.engine.gradient.GradientMeasure`)."""

    def measure_model(self, model: nn.Module, step: int) -> dict[str, float]:
        """The values at ``step`` by tag (not yet recorded: the driver records and logs them)."""
        raise NotImplementedError(f"{type(self).__name__} implements measure_model")
