r"""Gradient rank monitor
=====================

Effective rank of the per-example gradients (spec §6.2) and of their covariance (§6.3) on a fixed
training batch, at evaluations. Also home of the plumbing the gradient-based callbacks share
(:class:`GradientMeasureCallback`, the default loss :func:`answer_cross_entropy`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import override

from capgeo_callbacks.callbacks.base import MeasureCallback
from capgeo_callbacks.distributed import broadcast_object
from capgeo_callbacks.measures.gradients import (
    ForwardFn,
    LossFn,
    _split_batch,
    batch_size_of,
    default_forward,
    gradient_covariance_rank,
    gradient_effective_rank,
    per_example_gradients,
)
from capgeo_callbacks.measures.hessian import _math_sdpa
from capgeo_callbacks.measures.llc import _to_device

ANSWER_KEYS = ("input_ids", "targets", "answer_mask")


def answer_cross_entropy(output: Tensor, batch: Mapping[str, Tensor]) -> Tensor:
    """Mean cross-entropy over answer tokens: the default ``loss_fn`` for capgeo's dict batches.

    ``output`` are the logits (B, T, V) of ``pl_module(batch["input_ids"])``; the loss is
    ``sum(CE * mask) / sum(mask)`` over ``batch["targets"]`` (B, T) where ``batch["answer_mask"]`` is true.
    """
    per_token = F.cross_entropy(output.flatten(0, 1), batch["targets"].flatten(), reduction="none")
    mask = batch["answer_mask"].flatten().to(per_token.dtype)
    return (per_token * mask).sum() / mask.sum().clamp_min(1.0)


def is_answer_batch(batch: Any) -> bool:
    """Whether ``batch`` is a capgeo task batch (a mapping with input ids, targets and answer mask)."""
    return isinstance(batch, Mapping) and all(key in batch for key in ANSWER_KEYS)


def _describe(batch: Any) -> str:
    if isinstance(batch, Mapping):
        return f"a dict with keys {sorted(batch)}"
    if isinstance(batch, (tuple, list)):
        return f"a {type(batch).__name__} of {len(batch)} items"
    return f"a {type(batch).__name__}"


def slice_batch(batch: Any, start: int, stop: int) -> Any:
    """Examples ``start:stop`` of ``batch`` (every tensor leaf sliced), as detached clones."""
    leaves, rebuild = _split_batch(batch)
    return rebuild([leaf[start:stop].detach().clone() for leaf in leaves])


def _concat(parts: list[Any]) -> Any:
    """One batch from several with the same structure (non-tensor leaves from the first)."""
    if len(parts) == 1:
        return parts[0]
    leaves, rebuild = _split_batch(parts[0])
    columns = [_split_batch(part)[0] for part in parts]
    return rebuild([torch.cat([column[i] for column in columns]) for i in range(len(leaves))])


@contextlib.contextmanager
def measuring_context(module: nn.Module) -> Iterator[None]:
    """Where the gradient-based measures run: out of inference mode, with grad enabled, the global RNG
    forked (nothing drawn here reaches training's stream), attention on the math path (double backward,
    vmap batching rules), every submodule in eval mode; each submodule's mode is restored afterwards."""
    modes = [(m, m.training) for m in module.modules()]
    first = next(module.parameters(), None)
    device = first.device if first is not None else torch.device("cpu")
    cuda = []
    if device.type == "cuda":
        cuda = [device.index if device.index is not None else torch.cuda.current_device()]
    try:
        with torch.random.fork_rng(devices=cuda), torch.inference_mode(False), torch.enable_grad(), \
                _math_sdpa():
            module.eval()
            yield
    finally:
        for m, training in modes:
            m.training = training


class GradientMeasureCallback(MeasureCallback):
    r"""Base of the gradient-based monitors: a fixed training batch, measured at evaluations.

    **Fixed batch.** The first ``num_examples`` examples of the first training batch(es) seen, kept as
    detached clones on the module's device (``on_train_batch_start``); frozen at the first measurement
    (if fewer were seen by then, it warns and uses those). Under DDP rank zero's batch is broadcast
    once, so every rank measures the same examples on the same weights and gets the same values. It is
    part of the callback's state, so a resumed run keeps measuring on the same examples.

    **When.** In ``on_validation_start`` of the evaluations selected by ``every_n_evals``: the weights are
    exactly those the validation pass sees, the value is logged at the evaluation's step (beside
    ``val/acc``) and is in :meth:`values_at` before any ``on_validation_end`` (where
    :class:`~capgeo_callbacks.PrecursorDetector` reads it), and every validation is covered (step or
    time intervals, epoch ends, early stopping, the last one). Lightning runs that hook under
    ``torch.no_grad`` (``torch.inference_mode`` in ``Trainer.validate``), so the measure explicitly
    leaves it (``torch.inference_mode(False)``, ``torch.enable_grad()``) on the cached tensors, which
    were cloned during training and are not inference tensors (see :func:`measuring_context`).

    **No observer effect.** No weight, ``.grad``, buffer or optimizer state is touched, submodule modes
    are restored and the global RNG is forked, so training ends at bit-identical weights. A failing
    measure or non-finite gradients warn once per cause and skip the value; training goes on.

    Args:
        loss_fn: ``loss_fn(output, batch) -> scalar`` mean loss of a batch; default
            :func:`answer_cross_entropy`, which needs capgeo's dict batches (``input_ids``, ``targets``,
            ``answer_mask``): for other batches pass one (checked at the first training batch).
        forward: ``forward(module, batch) -> output``; default
            :func:`~capgeo_callbacks.measures.gradients.default_forward` (``module(batch["input_ids"])``
            for a dict, ``module(batch[0])`` for a tuple, ``module(batch)`` for a tensor).
        num_examples: size of the fixed batch.
        every_n_evals: measure at every n-th validation.
    """

    def __init__(
        self,
        loss_fn: LossFn | None,
        forward: ForwardFn | None,
        num_examples: int,
        every_n_evals: int,
    ) -> None:
        super().__init__(every_n_evals)
        if loss_fn is not None and not callable(loss_fn):
            raise ValueError(f"loss_fn must be callable (output, batch) -> scalar, got {loss_fn!r}")
        if forward is not None and not callable(forward):
            raise ValueError(f"forward must be callable (module, batch) -> output, got {forward!r}")
        self.loss_fn: LossFn = answer_cross_entropy if loss_fn is None else loss_fn
        self.forward: ForwardFn = default_forward if forward is None else forward
        self._default_loss = loss_fn is None
        self.num_examples = num_examples
        self.fixed_batch: Any = None
        self._parts: list[Any] = []
        self._cached = 0
        self._frozen = False
        self._synced = False

    # -- the fixed batch ---------------------------------------------------------------------------
    def _check_batch(self, batch: Any) -> None:
        if self._default_loss and not is_answer_batch(batch):
            raise ValueError(
                f"{type(self).__name__}: the training batch is {_describe(batch)}; the default loss_fn "
                f"(answer-masked cross-entropy of pl_module(batch['input_ids'])) needs a dict batch with "
                f"keys {list(ANSWER_KEYS)}. Pass loss_fn=lambda output, batch: ... (and forward=lambda "
                "module, batch: ... if the model is not called as module(batch[0]))"
            )
        batch_size_of(batch)  # raises on a batch without a leading batch dimension

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self._frozen or self._cached >= self.num_examples:
            return
        if self._cached == 0:
            self._check_batch(batch)
        part = slice_batch(batch, 0, self.num_examples - self._cached)
        self._parts.append(part)
        self._cached += batch_size_of(part)
        if self._cached >= self.num_examples:
            self._freeze()

    def _freeze(self) -> None:
        if self._parts:
            self.fixed_batch = _concat(self._parts)
            self._parts = []
        self._frozen = True

    def _measurement_batch(self, pl_module: pl.LightningModule) -> Any:
        """The fixed batch on the module's device, rank zero's under DDP (a collective, on every rank,
        since every rank has seen the same number of training batches); ``None`` before any was seen."""
        if self.fixed_batch is None and not self._parts:
            return None  # e.g. Trainer.validate before fit: cache at the first training batches later
        if not self._frozen:
            self._freeze()
        if not self._synced:
            local = None if self.fixed_batch is None else _to_device(self.fixed_batch, "cpu")
            shared = broadcast_object(local)
            self.fixed_batch = shared
            self._synced = True
            if shared is not None and batch_size_of(shared) < self.num_examples:
                self.warn_once("few", f"{type(self).__name__}: only {batch_size_of(shared)} training "
                               f"examples were seen before the first measurement, fewer than "
                               f"{self.num_examples}; measuring on those")
        if self.fixed_batch is None:
            return None
        self.fixed_batch = _to_device(self.fixed_batch, pl_module.device)
        return self.fixed_batch

    # -- measuring ---------------------------------------------------------------------------------
    def measure(self, pl_module: pl.LightningModule, batch: Any, step: int) -> dict[str, float]:
        """The values to log at ``step`` (runs inside :func:`measuring_context`)."""
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
            if any(part in text for part in ignore):
                continue
            self.warn_once(f"measure:{text[:60]}", f"{type(self).__name__} at step {step}: {text}")
        return result

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        measure = self.should_measure(trainer)
        self.evaluations += 1
        if not measure:
            return
        step = trainer.global_step
        batch = self._measurement_batch(pl_module)
        if batch is None:
            self.warn_once("no-batch", f"{type(self).__name__}: no training batch has been seen (the fixed "
                           f"batch is cached during fit); nothing measured at step {step}")
            return
        try:
            with measuring_context(pl_module):
                values = self.measure(pl_module, batch, step)
        except Exception as error:  # noqa: BLE001 - a failing measure must never stop training
            kind = type(error).__name__
            self.warn_once(f"error:{kind}", f"{type(self).__name__}: measuring at step {step} failed "
                           f"({kind}: {str(error)[:300]}); skipped")
            return
        self.record(pl_module, step, values)

    # -- state -------------------------------------------------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        fixed = None if not self._frozen or self.fixed_batch is None else _to_device(self.fixed_batch, "cpu")
        return {**super().state_dict(), "fixed_batch": fixed}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        fixed = state_dict.get("fixed_batch")
        self._parts, self._synced = [], False
        self.fixed_batch = fixed
        self._frozen = fixed is not None
        self._cached = 0 if fixed is None else batch_size_of(fixed)


class GradientRankMonitor(GradientMeasureCallback):
    r"""Log the effective rank of the per-example gradients and of their covariance at evaluations.

    Per-example gradients of ``loss_fn`` on a fixed batch of ``batch_size`` training examples
    (``torch.func`` ``vmap(grad)``), flattened into G (B x P). Roy and Vetterli's effective rank
    :math:`\exp(-\sum_k p_k \log p_k)`, :math:`p_k = s_k / \sum_j s_j`, of the singular values s of G
    (spec §6.2), and of G centred over examples, whose Gram matrix gives the covariance spectrum, with
    its numerical rank (singular values above :math:`\max(s) \cdot B \cdot \epsilon`, §6.3). Only
    B x B Gram matrices are formed.

    Measured in ``on_validation_start`` on the weights the validation sees, out of inference mode
    on the cached batch, in eval mode, with attention on the math path; see
    :class:`GradientMeasureCallback` for the fixed batch, DDP and the no-observer-effect guarantees.

    Args:
        loss_fn: ``loss_fn(output, batch) -> scalar`` mean loss; default answer-masked cross-entropy
            (:func:`answer_cross_entropy`), for capgeo's dict batches only.
        batch_size: examples in the fixed batch (B).
        every_n_evals: measure at every n-th validation.
        forward: ``forward(module, batch) -> output``; default ``module(batch["input_ids"])`` for a dict
            batch, ``module(batch[0])`` for a tuple.
        chunk_size: examples per ``vmap`` call (bounds memory); ``None`` for all at once.

    Raises:
        ValueError: on a bad argument, or at the first training batch if ``loss_fn`` is not given and the
            batch is not a dict with ``input_ids``, ``targets`` and ``answer_mask``.

    Logged keys:
        ``grad_erank`` (effective rank of G), ``grad_cov_rank`` (effective rank of the centred G, i.e. of
        the gradient covariance) and ``grad_cov_numerical_rank``.

    Example::

        monitor = GradientRankMonitor(loss_fn=lambda logits, batch: F.cross_entropy(logits, batch[1]))
        trainer = Trainer(callbacks=[monitor], val_check_interval=50)
    """

    def __init__(
        self,
        loss_fn: LossFn | None = None,
        batch_size: int = 128,
        every_n_evals: int = 1,
        forward: ForwardFn | None = None,
        chunk_size: int | None = None,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 2:
            raise ValueError(f"batch_size must be an integer >= 2, got {batch_size!r}")
        if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
            raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
        super().__init__(loss_fn, forward, batch_size, every_n_evals)
        self.batch_size = batch_size
        self.chunk_size = chunk_size

    @property
    def state_key(self) -> str:
        return self._generate_state_key(batch_size=self.batch_size, every_n_evals=self.every_n_evals)

    @property
    def tags(self) -> list[str]:
        """The logged tags."""
        return ["grad_erank", "grad_cov_rank", "grad_cov_numerical_rank"]

    @override
    def measure(self, pl_module: pl.LightningModule, batch: Any, step: int) -> dict[str, float]:
        grads = self.call_quietly(step, per_example_gradients, pl_module, self.loss_fn, batch,
                                  forward=self.forward, chunk_size=self.chunk_size)
        if not bool(torch.isfinite(grads).all()):
            self.warn_once("nonfinite", f"GradientRankMonitor: non-finite per-example gradients at step "
                           f"{step}; skipped (and at any later step where they are non-finite)")
            return {}
        erank = gradient_effective_rank(grads)
        cov_rank, numerical_rank = gradient_covariance_rank(grads)
        return {"grad_erank": erank, "grad_cov_rank": cov_rank,
                "grad_cov_numerical_rank": float(numerical_rank)}
