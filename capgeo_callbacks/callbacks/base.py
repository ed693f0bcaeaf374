"""What capgeo's measure callbacks share: the series each owns and its state, how the run session reads them
(:func:`measurements_of`), and the fixed training batch of the gradient-based measures.

The failure rule (:mod:`capgeo_callbacks.run.failures`): configuration errors (bad arguments, a layer pattern
that matches nothing) raise in ``__init__`` or ``setup``, before the first step; anything that fails later inside a
hook (a measure, a logger, a file) is reported once, as a warning, and skipped: training goes on.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from capgeo_callbacks.callbacks.distributed import broadcast_object
from capgeo_callbacks.capture.batches import (
    ANSWER_KEYS,
    answer_cross_entropy,
    batch_size_of,
    concat_batches,
    default_forward,
    describe_batch,
    is_answer_batch,
    slice_batch,
    to_device,
)
from capgeo_callbacks.capture.measuring import measuring
from capgeo_callbacks.detection.series import append_point
from capgeo_callbacks.integrations.compat import logged_step as lightning_logged_step
from capgeo_callbacks.measures.gradients import ForwardFn, LossFn
from capgeo_callbacks.run.budget import OPTIONAL, RULE_INPUT, OverheadBudget, steps_of
from capgeo_callbacks.run.failures import WarnOnce, check_callable, check_positive_int, never_fails
from capgeo_callbacks.run.session import Measurements


class MeasureCallback(Callback):
    """Base of the measure callbacks: each owns ``series[tag] = [[step, value], ...]`` of what it logged.

    :class:`~capgeo_callbacks.PrecursorDetector` reads the series (nothing else keeps a copy: :func:`measurements_of`),
    and a resumed run continues them without gaps or duplicates.

    Under a :class:`~capgeo_callbacks.PrecursorDetector` with an overhead budget, the detector hands this callback
    its run's :class:`~capgeo_callbacks.run.budget.OverheadBudget` (:meth:`use_budget`): the callback's work is timed
    under :attr:`work`, and an evaluation its cadence selects is measured only if the budget allows it.

    Args:
        every_n_evals: measure at every n-th validation (1 = every one).
    """

    def __init__(self, every_n_evals: int = 1) -> None:
        check_positive_int("every_n_evals", every_n_evals)
        self.every_n_evals = every_n_evals
        self.series: dict[str, list[list[float]]] = {}
        self.rows: dict[str, int] = {}  # rows each tag was last measured on
        self.evaluations = 0
        self.warn_once = WarnOnce(type(self).__name__)
        self.budget: OverheadBudget | None = None  # the run's, from its detector (not part of the state)

    @property
    def tags(self) -> list[str]:
        """The tags this callback logs (those known before the first measurement)."""
        return []

    @property
    def selector_name(self) -> str | None:
        """The token selector the measure uses, for the summary (None: not a hidden-state measure)."""
        return None

    @property
    def prefix(self) -> str:
        return ""

    @property
    def left_out(self) -> dict[str, str]:
        """Measures this callback left out for lack of their inputs, by tag prefix, with why: noted in the summary
        (``measures_left_out``) rather than warned, where the user did not ask for them by name."""
        return {}

    @property
    def work(self) -> str:
        """The name of this callback's work in the overhead budget's record: its tag prefix, else its class's."""
        return self.prefix or type(self).__name__

    def use_budget(self, budget: OverheadBudget | None, rule_input: bool = False) -> None:
        """Time this callback's work in ``budget`` and measure only where it allows (None: no budget);
        ``rule_input``: the run's rules read what it measures, so it is thinned last, to an even cadence."""
        self.budget = budget
        if budget is not None:
            budget.add_work(self.work, RULE_INPUT if rule_input else OPTIONAL)

    def timed(self) -> AbstractContextManager[Any]:
        """``with self.timed():`` charges the block to this callback's work in the budget (nothing without one)."""
        return nullcontext() if self.budget is None else self.budget.timing(self.work)

    def should_measure(self, trainer: pl.Trainer) -> bool:
        """Whether the validation now starting is one this callback measures at: its cadence selects it and the
        overhead budget, if any, allows it (asked once per validation)."""
        if trainer.sanity_checking or self.evaluations % self.every_n_evals:
            return False
        # under DDP every rank measures or none does (the rows are gathered): rank zero's decision, broadcast
        return self.budget is None or self.budget.allows(self.work, trainer.global_step,
                                                           agree=lambda runs: bool(broadcast_object(runs)))

    def record(self, trainer: pl.Trainer, step: int, values: dict[str, float]) -> None:
        """Append finite ``values`` at ``step`` to the series and log them to every logger of ``trainer``.

        Through each logger's ``log_metrics`` (rank zero only; the values are identical on every rank, the
        rows being gathered first), not ``pl_module.log``, which costs a few milliseconds per key and per
        evaluation; so these tags are not in ``trainer.callback_metrics``.
        """
        finite: dict[str, float] = {}
        for tag, value in values.items():
            if not math.isfinite(value):
                self.warn_once(tag, f"{tag}: non-finite value {value} at step {step}; skipped")
                continue
            append_point(self.series.setdefault(tag, []), step, float(value))
            finite[tag] = float(value)
        if finite and trainer.is_global_zero:
            # the step Lightning logs the validation's own metrics at (optimizer steps taken before this
            # validation's hooks ran), so that RankMe and val/acc line up in every logger
            logged_step = lightning_logged_step(trainer, step)
            for logger in trainer.loggers:
                logger.log_metrics(finite, step=logged_step if trainer.state.fn == "fit" else step)

    def values_at(self, step: int) -> dict[str, float]:
        """The values measured at ``step`` (empty if this callback did not measure then)."""
        return {tag: points[-1][1] for tag, points in self.series.items() if points and points[-1][0] == step}

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"series": {tag: [list(p) for p in pts] for tag, pts in self.series.items()},
                "evaluations": self.evaluations, "rows": dict(self.rows)}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.series = {tag: [list(p) for p in pts] for tag, pts in state_dict.get("series", {}).items()}
        self.evaluations = int(state_dict.get("evaluations", 0))
        rows = dict(state_dict.get("rows", {}))
        for older in ("rows_used", "probe_rows"):  # an earlier layout: per layer, without the prefix
            rows.update({f"{self.prefix}/{layer}": n for layer, n in state_dict.get(older, {}).items()})
        self.rows = rows


def measurements_of(trainer: pl.Trainer, pl_module: pl.LightningModule) -> Measurements:
    """What the trainer's measure callbacks hold: every series by tag (each callback's in its layer order), the
    rows each was measured on, each hidden-state measure's token selector, the module's parameter count and the
    measures left out."""
    series: dict[str, list[list[float]]] = {}
    rows: dict[str, int] = {}
    selectors: dict[str, str] = {}
    left_out: dict[str, str] = {}
    for callback in trainer.callbacks:
        if isinstance(callback, MeasureCallback):
            left_out.update(callback.left_out)
            ordered = [tag for tag in callback.tags if tag in callback.series]
            ordered += [tag for tag in callback.series if tag not in ordered]
            series.update({tag: callback.series[tag] for tag in ordered})
            rows.update(callback.rows)
            if callback.selector_name:
                selectors[callback.prefix] = callback.selector_name
    return Measurements(series, rows, selectors, sum(p.numel() for p in pl_module.parameters()), left_out)


def budget_measures(budget: OverheadBudget, trainer: pl.Trainer, reads: Callable[[list[str]], bool],
                    horizon: int | None) -> None:
    """Hand a run's overhead budget to every measure callback of ``trainer`` (a rule input where ``reads(tags)``:
    the run's rules read one of its tags), count its protected start over ``horizon`` steps (the run's, projected to
    where this fit stops), and start its clock."""
    budget.horizon, budget.stop = horizon, steps_of(trainer.max_steps)
    for callback in trainer.callbacks:
        if isinstance(callback, MeasureCallback):
            callback.use_budget(budget, rule_input=reads(callback.tags))
    budget.start()


class GradientMeasureCallback(MeasureCallback):
    r"""Base of the gradient-based monitors: a fixed training batch, measured at evaluations.

    **Fixed batch.** The first ``num_examples`` examples of the first training batch(es) seen, kept as
    detached clones (``on_train_batch_start``); frozen at the first measurement (if fewer were seen by
    then, it warns and uses those). Under DDP rank zero's batch is broadcast once, so every rank measures
    the same examples on the same weights. It is part of the callback's state, so a resumed run keeps
    measuring on the same examples.

    **When.** In ``on_validation_start`` of the evaluations selected by ``every_n_evals``: the weights are
    exactly those the validation pass sees and the value is logged at the evaluation's step. Lightning
    runs that hook under ``torch.no_grad`` (``torch.inference_mode`` in ``Trainer.validate``), so the
    measure explicitly leaves it (:func:`~capgeo_callbacks.capture.measuring.measuring` with ``grad``) on the
    cached tensors, which were cloned during training and are not inference tensors. At step 0 the batch is
    the first training batch, cached when Lightning fetches it for the first step.

    **No observer effect.** No weight, ``.grad``, buffer or optimizer state is touched, submodule modes
    are restored and the global RNG is forked, so training ends at bit-identical weights.

    Args:
        loss_fn: ``loss_fn(output, batch) -> scalar`` mean loss of a batch; default
            :func:`~capgeo_callbacks.capture.batches.answer_cross_entropy`, which needs capgeo's dict batches.
        forward: ``forward(module, batch) -> output``; default
            :func:`~capgeo_callbacks.capture.batches.default_forward`.
        num_examples: size of the fixed batch.
        every_n_evals: measure at every n-th validation.
    """

    def __init__(self, loss_fn: LossFn | None, forward: ForwardFn | None, num_examples: int,
                 every_n_evals: int) -> None:
        super().__init__(every_n_evals)
        check_callable("loss_fn", loss_fn, "(output, batch) -> scalar")
        check_callable("forward", forward, "(module, batch) -> output")
        check_positive_int("num_examples", num_examples)
        self.loss_fn: LossFn = answer_cross_entropy if loss_fn is None else loss_fn
        self.forward: ForwardFn = default_forward if forward is None else forward
        self._default_loss = loss_fn is None
        self.num_examples = num_examples
        self.fixed_batch: Any = None
        self._parts: list[Any] = []
        self._cached = 0
        self._frozen = False
        self._synced = False
        self._last_key: Any = None
        self._warmed_up = False

    def _check_batch(self, batch: Any) -> None:
        if self._default_loss and not is_answer_batch(batch):
            raise ValueError(
                f"{type(self).__name__}: the training batch is {describe_batch(batch)}; the default loss_fn "
                f"(answer-masked cross-entropy of pl_module(batch['input_ids'])) needs a dict batch with keys "
                f"{list(ANSWER_KEYS)}. Pass loss_fn=lambda output, batch: ... (and forward=lambda module, "
                "batch: ... if the model is not called as module(batch[0]))"
            )
        batch_size_of(batch)  # raises on a batch without a leading batch dimension

    def cache(self, batch: Any, key: Any = None) -> None:
        """Keep examples of a training batch until ``num_examples`` are held; a batch offered again under
        the same ``key`` (``(step, batch_idx)``) is not kept twice."""
        if key is not None and key == self._last_key:
            return
        self._last_key = key
        if self._frozen or self._cached >= self.num_examples:
            return
        if self._cached == 0:
            self._check_batch(batch)
        part = slice_batch(batch, 0, self.num_examples - self._cached)
        self._parts.append(part)
        self._cached += batch_size_of(part)
        if self._cached >= self.num_examples:
            self._freeze()

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        # a batch the default loss cannot read is a configuration error: it raises here, before the first update
        if not self._frozen:
            with self.timed():
                self.cache(batch, key=(trainer.global_step, batch_idx))

    def _freeze(self) -> None:
        if self._parts:
            self.fixed_batch = concat_batches(self._parts)
            self._parts = []
        self._frozen = True

    def _measurement_batch(self, pl_module: pl.LightningModule) -> Any:
        """The fixed batch on the module's device, rank zero's under DDP (a collective, on every rank);
        ``None`` before any training batch was seen."""
        if self.fixed_batch is None and not self._parts:
            return None
        if not self._frozen:
            self._freeze()
        if not self._synced:
            local = None if self.fixed_batch is None else to_device(self.fixed_batch, "cpu")
            shared = broadcast_object(local)
            self.fixed_batch = shared
            self._synced = True
            if shared is not None and batch_size_of(shared) < self.num_examples:
                self.warn_once("few", f"only {batch_size_of(shared)} training examples were seen before the "
                               f"first measurement, fewer than {self.num_examples}; measuring on those")
        if self.fixed_batch is None:
            return None
        self.fixed_batch = to_device(self.fixed_batch, pl_module.device)
        return self.fixed_batch

    def measure(self, pl_module: pl.LightningModule, batch: Any, step: int) -> dict[str, float]:
        """The values to log at ``step`` (runs inside :func:`~capgeo_callbacks.capture.measuring.measuring`)."""
        raise NotImplementedError

    def call_quietly(self, step: int, fn: Callable[..., Any], *args: Any, ignore: tuple[str, ...] = (),
                     **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` with its warnings re-issued once per message, naming the step (those
        containing one of the ``ignore`` substrings are dropped: the caller reports them itself)."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = fn(*args, **kwargs)
        for warning in caught:
            text = str(warning.message)
            if not any(part in text for part in ignore):
                self.warn_once(f"measure:{text[:60]}", f"at step {step}: {text}")
        return result

    def measure_now(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Measure on the fixed batch at the current step, if this evaluation is one to measure at."""
        measure = self.should_measure(trainer)
        self.evaluations += 1
        if not measure:
            return
        step = trainer.global_step
        batch = self._measurement_batch(pl_module)
        if batch is None:
            self.warn_once("no-batch", "no training batch has been seen (the fixed batch is cached during fit); "
                           f"nothing measured at step {step}")
            return
        try:
            with measuring(pl_module, grad=True):
                if not self._warmed_up:
                    # one plain forward first: a module that caches tensors on its first call (a mask, rotary
                    # tables) must not cache functorch wrappers from inside vmap/grad
                    with torch.no_grad():
                        self.forward(pl_module, batch)
                    self._warmed_up = True
                values = self.measure(pl_module, batch, step)
        except Exception as error:  # noqa: BLE001 - a failing measure must never stop training
            kind = type(error).__name__
            self.warn_once(f"error:{kind}", f"measuring at step {step} failed ({kind}: {str(error)[:300]}); skipped")
            return
        self.record(trainer, step, values)

    @override
    @never_fails
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            with self.timed():
                self.measure_now(trainer, pl_module)

    @override
    def state_dict(self) -> dict[str, Any]:
        fixed = None if not self._frozen or self.fixed_batch is None else to_device(self.fixed_batch, "cpu")
        return {**super().state_dict(), "fixed_batch": fixed}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        fixed = state_dict.get("fixed_batch")
        self._parts, self._synced = [], False
        self.fixed_batch = fixed
        self._frozen = fixed is not None
        self._cached = 0 if fixed is None else batch_size_of(fixed)
