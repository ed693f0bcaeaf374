r"""Gradient rank monitor
=====================

Effective rank of the per-example gradients and of their covariance on a fixed training batch, at
evaluations.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import lightning.pytorch as pl
import torch
from typing_extensions import override

from capgeo_callbacks.callbacks.base import GradientMeasureCallback
from capgeo_callbacks.measures.gradients import (
    ForwardFn,
    LossFn,
    gradient_covariance_rank,
    gradient_effective_rank,
    per_example_gradients,
)
from capgeo_callbacks.run.failures import check_positive_int


class GradientRankMonitor(GradientMeasureCallback):
    r"""Log the effective rank of the per-example gradients and of their covariance at evaluations.

    Per-example gradients of ``loss_fn`` on a fixed batch of ``batch_size`` training examples
    (``torch.func`` ``vmap(grad)``), flattened into G (B x P). Roy and Vetterli's effective rank
    :math:`\exp(-\sum_k p_k \log p_k)`, :math:`p_k = s_k / \sum_j s_j`, of the singular values s of G
    and of G centred over examples, whose Gram matrix gives the covariance spectrum, with
    its numerical rank (singular values above :math:`\max(s) \cdot B \cdot \epsilon`). Only
    B x B Gram matrices are formed.

    Measured in ``on_validation_start`` on the weights the validation sees, out of inference mode
    on the cached batch, in eval mode, with attention on the math path; see
    :class:`GradientMeasureCallback` for the fixed batch, DDP and the no-observer-effect guarantees.

    Args:
        loss_fn: ``loss_fn(output, batch) -> scalar`` mean loss; default answer-masked cross-entropy
            (:func:`~capgeo_callbacks.capture.batches.answer_cross_entropy`), for capgeo's dict batches only.
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
        check_positive_int("batch_size", batch_size, 2)
        if chunk_size is not None:
            check_positive_int("chunk_size", chunk_size)
        super().__init__(loss_fn, forward, batch_size, every_n_evals)
        self.batch_size = batch_size
        self.chunk_size = chunk_size

    @cached_property  # Lightning reads it at every hook call (its profiler's name): formatted once
    def state_key(self) -> str:  # type: ignore[override]
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
            self.warn_once("nonfinite", f"non-finite per-example gradients at step "
                           f"{step}; skipped (and at any later step where they are non-finite)")
            return {}
        erank = gradient_effective_rank(grads)
        cov_rank, numerical_rank = gradient_covariance_rank(grads)
        return {"grad_erank": erank, "grad_cov_rank": cov_rank,
                "grad_cov_numerical_rank": float(numerical_rank)}
