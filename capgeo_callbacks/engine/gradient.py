r"""The measures of the model and a fixed training batch: gradient ranks, the Hessian, the LLC, the commutator defect.

A :class:`GradientMeasure` is a function of the model and a fixed batch of training examples (:meth:`~GradientMeasure.
measure`), with the batch it keeps: whatever drives it hands it training batches (:meth:`~GradientMeasure.cache`)
and asks for its values at the start of an evaluation (:meth:`~GradientMeasure.measure_model`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

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
from capgeo_callbacks.engine.distributed import broadcast_object
from capgeo_callbacks.engine.measure import ModelMeasure
from capgeo_callbacks.measures.gradients import ForwardFn, LossFn
from capgeo_callbacks.run.failures import check_callable, check_positive_int

__all__ = ["GradientMeasure"]


class GradientMeasure(ModelMeasure):
    r"""Base of the measures of the model on a fixed training batch, at evaluations.

    **Fixed batch.** The first ``num_examples`` examples of the first training batch(es) handed to :meth:`cache`,
    kept as detached clones; frozen at the first measurement (if fewer were seen by then, it warns and uses those).
    Under DDP rank zero's batch is broadcast once, so every rank measures the same examples on the same weights. It is
    part of the measure's state, so a resumed run keeps measuring on the same examples.

    **When.** At the start of the evaluations its cadence selects, on the weights that evaluation sees, out of
    inference mode (:func:`~capgeo_callbacks.capture.measuring.measuring` with ``grad``) on the cached tensors, which
    were cloned during training and are not inference tensors.

    **No observer effect.** No weight, ``.grad``, buffer or optimizer state is touched, submodule modes are restored
    and the global RNG is forked, so training ends at bit-identical weights.

    A measure of one's own implements :meth:`measure`: a function of the model and the batch.

    Args:
        loss_fn: ``loss_fn(output, batch) -> scalar`` mean loss of a batch; default
            :func:`~capgeo_callbacks.capture.batches.answer_cross_entropy`, which needs capgeo's dict batches.
        forward: ``forward(module, batch) -> output``; default
            :func:`~capgeo_callbacks.capture.batches.default_forward`.
        num_examples: size of the fixed batch.
        every_n_evals: measure at every n-th evaluation.
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

    def use_loss(self, loss_fn: LossFn, forward: ForwardFn) -> None:
        """The loss and forward of the framework driving it, where none was given (a Hugging Face model's own
        ``output.loss``)."""
        if self._default_loss:
            self.loss_fn, self.forward, self._default_loss = loss_fn, forward, False

    def _check_batch(self, batch: Any) -> None:
        if self._default_loss and not is_answer_batch(batch):
            raise ValueError(
                f"{type(self).__name__}: the training batch is {describe_batch(batch)}; the default loss_fn "
                f"(answer-masked cross-entropy of pl_module(batch['input_ids'])) needs a dict batch with keys "
                f"{list(ANSWER_KEYS)}. Pass loss_fn=lambda output, batch: ... (and forward=lambda module, "
                "batch: ... if the model is not called as module(batch[0]))"
            )
        batch_size_of(batch)  # raises on a batch without a leading batch dimension

    @property
    def caching(self) -> bool:
        """Whether it still takes training examples (its fixed batch is not frozen)."""
        return not self._frozen

    def cache(self, batch: Any, key: Any = None) -> None:
        """Keep examples of a training batch until ``num_examples`` are held; a batch offered again under
        the same ``key`` (``(step, batch_idx)``) is not kept twice. A batch the default loss cannot read is a
        configuration error: it raises, before the first update."""
        if key is not None and key == self._last_key:
            return
        self._last_key = key
        if self._frozen or self._cached >= self.num_examples:
            return
        if self._cached == 0:
            self._check_batch(batch)
        with self.timed():
            part = slice_batch(batch, 0, self.num_examples - self._cached)
            self._parts.append(part)
            self._cached += batch_size_of(part)
            if self._cached >= self.num_examples:
                self._freeze()

    def _freeze(self) -> None:
        if self._parts:
            self.fixed_batch = concat_batches(self._parts)
            self._parts = []
        self._frozen = True

    def _measurement_batch(self, device: torch.device) -> Any:
        """The fixed batch on ``device``, rank zero's under DDP (a collective, on every rank); ``None`` before any
        training batch was seen."""
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
        self.fixed_batch = to_device(self.fixed_batch, device)
        return self.fixed_batch

    def measure(self, model: nn.Module, batch: Any, step: int) -> dict[str, float]:
        """The values to log at ``step``: a function of the model and the fixed batch (runs inside
        :func:`~capgeo_callbacks.capture.measuring.measuring`, gradients enabled)."""
        raise NotImplementedError(f"{type(self).__name__} implements measure(model, batch, step)")

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

    def measure_model(self, model: nn.Module, step: int) -> dict[str, float]:
        """The values on the fixed batch at ``step`` (a failure is said once and skipped: nothing then)."""
        first = next(model.parameters(), None)
        batch = self._measurement_batch(first.device if first is not None else torch.device("cpu"))
        if batch is None:
            self.warn_once("no-batch", "no training batch has been seen (the fixed batch is cached during training); "
                           f"nothing measured at step {step}")
            return {}
        try:
            with measuring(model, grad=True):
                if not self._warmed_up:
                    # one plain forward first: a module that caches tensors on its first call (a mask, rotary
                    # tables) must not cache functorch wrappers from inside vmap/grad
                    with torch.no_grad():
                        self.forward(model, batch)
                    self._warmed_up = True
                return self.measure(model, batch, step)
        except Exception as error:  # noqa: BLE001 - a failing measure must never stop training
            kind = type(error).__name__
            self.warn_once(f"error:{kind}", f"measuring at step {step} failed ({kind}: {str(error)[:300]}); skipped")
            return {}

    def state_dict(self) -> dict[str, Any]:
        fixed = None if not self._frozen or self.fixed_batch is None else to_device(self.fixed_batch, "cpu")
        return {**super().state_dict(), "fixed_batch": fixed}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        super().load_state_dict(state_dict)
        fixed = state_dict.get("fixed_batch")
        self._parts, self._synced = [], False
        self.fixed_batch = fixed
        self._frozen = fixed is not None
        self._cached = 0 if fixed is None else batch_size_of(fixed)
