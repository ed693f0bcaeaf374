r"""Commutator defect monitor
=========================

How far a gradient step on one training batch and one on another fail to commute, on fixed training batches, at
evaluations.
"""

from __future__ import annotations

import math
import statistics
from functools import cached_property
from typing import Any

import lightning.pytorch as pl
from typing_extensions import override

from capgeo_callbacks.callbacks.base import GradientMeasureCallback
from capgeo_callbacks.capture.batches import batch_size_of, slice_batch
from capgeo_callbacks.keys import COMMUTATOR_DEFECT
from capgeo_callbacks.measures.commutator import model_commutator
from capgeo_callbacks.measures.gradients import ForwardFn, LossFn
from capgeo_callbacks.run.failures import check_positive_int


class CommutatorDefectMonitor(GradientMeasureCallback):
    r"""Log the commutator defect of the loss on fixed pairs of training batches at evaluations.

    For batches A and B, :math:`D = \|H_B g_A - H_A g_B\| / (\|g_A\| \|g_B\|)`, the limit as the step size falls of
    :math:`\|\theta_{AB} - \theta_{BA}\| / (\eta^2 \|g_A\| \|g_B\|)`, where :math:`\theta_{AB}` is a plain gradient
    step of size :math:`\eta` on A then on B (Xu 2026, arXiv 2602.16967;
    :func:`~capgeo_callbacks.measures.commutator.commutator`). With ``step_size`` the finite form is measured
    instead, in float64. The fixed batch (the first ``batch_size`` training examples) is cut into ``2 * num_pairs``
    consecutive parts of equal size; pair k is parts 2k and 2k + 1, and the value logged is the mean of the pairs'
    defects. The same examples at every evaluation: the series moves only with the weights.

    When a gradient norm of any pair is at or below ``min_grad_norm`` (a memorised training set, whose float32
    gradient is rounding noise) nothing is logged at that evaluation, said once: the series has a gap, never a NaN
    or a value averaged over fewer pairs.

    Measured in ``on_validation_start`` on the weights the validation sees, out of inference mode on the cached
    batch, in eval mode, on the math attention path; see
    :class:`~capgeo_callbacks.callbacks.base.GradientMeasureCallback` for the fixed batch, DDP and the
    no-observer-effect guarantees. A pair costs two gradients with their graphs and one backward through both (about
    three training steps' worth of its examples).

    Args:
        loss_fn: ``loss_fn(output, batch) -> scalar`` mean loss; default answer-masked cross-entropy, for capgeo's
            dict batches only.
        batch_size: examples in the fixed batch, at least ``2 * num_pairs``.
        num_pairs: disjoint pairs of batches averaged.
        every_n_evals: measure at every n-th validation.
        step_size: eta of the finite form (float64), or None for the small-step form.
        min_grad_norm: a gradient norm at or below it skips the evaluation, >= 0.
        forward: ``forward(module, batch) -> output``; default ``module(batch["input_ids"])`` for a dict batch,
            ``module(batch[0])`` for a tuple.

    Raises:
        ValueError: on a bad argument, or at the first training batch if ``loss_fn`` is not given and the batch is
            not a dict with ``input_ids``, ``targets`` and ``answer_mask``.

    Logged keys:
        ``commutator/defect``.

    Example::

        monitor = CommutatorDefectMonitor(loss_fn=lambda logits, batch: F.cross_entropy(logits, batch[1]))
        trainer = Trainer(callbacks=[monitor, EvaluationSchedule()])
    """

    def __init__(
        self,
        loss_fn: LossFn | None = None,
        batch_size: int = 64,
        num_pairs: int = 1,
        every_n_evals: int = 8,
        step_size: float | None = None,
        min_grad_norm: float = 1e-6,
        *,
        forward: ForwardFn | None = None,
    ) -> None:
        check_positive_int("num_pairs", num_pairs)
        check_positive_int("batch_size", batch_size, 2 * num_pairs)
        if step_size is not None and (isinstance(step_size, bool) or not isinstance(step_size, (int, float))
                                      or not 0 < step_size < math.inf):
            raise ValueError(f"step_size must be a positive finite number (the finite form) or None (the small-step "
                             f"form), got {step_size!r}")
        if isinstance(min_grad_norm, bool) or not isinstance(min_grad_norm, (int, float)) \
                or not 0 <= min_grad_norm < math.inf:
            raise ValueError(f"min_grad_norm must be a finite number >= 0, got {min_grad_norm!r}")
        super().__init__(loss_fn, forward, batch_size, every_n_evals)
        self.batch_size = batch_size
        self.num_pairs = num_pairs
        self.step_size = None if step_size is None else float(step_size)
        self.min_grad_norm = float(min_grad_norm)

    @cached_property  # Lightning reads it at every hook call (its profiler's name): formatted once
    def state_key(self) -> str:  # type: ignore[override]
        return self._generate_state_key(batch_size=self.batch_size, num_pairs=self.num_pairs,
                                        step_size=self.step_size, every_n_evals=self.every_n_evals)

    @property
    def tags(self) -> list[str]:
        """The logged tags."""
        return [COMMUTATOR_DEFECT]

    def pairs(self, batch: Any) -> list[tuple[Any, Any]]:
        """The fixed batch's pairs (A, B): ``2 * num_pairs`` consecutive parts of equal size, the rest unused."""
        part = batch_size_of(batch) // (2 * self.num_pairs)
        parts = [slice_batch(batch, i * part, (i + 1) * part) for i in range(2 * self.num_pairs)]
        return [(parts[2 * k], parts[2 * k + 1]) for k in range(self.num_pairs)] if part else []

    @override
    def measure(self, pl_module: pl.LightningModule, batch: Any, step: int) -> dict[str, float]:
        pairs = self.pairs(batch)
        if not pairs:
            self.warn_once("few", f"{batch_size_of(batch)} examples cannot make {self.num_pairs} pair(s) of batches; "
                           "nothing measured")
            return {}
        results = [self.call_quietly(step, model_commutator, pl_module, self.loss_fn, a, b, forward=self.forward,
                                     step_size=self.step_size) for a, b in pairs]
        norms = [norm for r in results for norm in (r.grad_norm_a, r.grad_norm_b)]
        if not all(math.isfinite(norm) for norm in norms):
            self.warn_once("nonfinite", f"non-finite gradients at step {step}; skipped (and at any later step where "
                           "they are non-finite)")
            return {}
        if min(norms) <= self.min_grad_norm:
            self.warn_once("small-gradient", f"at step {step} a batch's gradient norm is {min(norms):.3g}, at or "
                           f"below min_grad_norm={self.min_grad_norm:g}: the defect divides by it; nothing logged at "
                           "this step (nor at any later step where it happens)")
            return {}
        defects = [r.defect for r in results]
        if not all(math.isfinite(d) for d in defects):
            self.warn_once("nonfinite-defect", f"non-finite commutator defect at step {step}; skipped (and at any "
                           "later step where it is non-finite)")
            return {}
        return {COMMUTATOR_DEFECT: statistics.fmean(defects)}
