r"""Hessian monitor
===============

Top eigenvalues (and optionally the trace) of the loss Hessian on a fixed training batch .
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Any

import lightning.pytorch as pl
import torch
from typing_extensions import override

from capgeo_callbacks.callbacks.base import GradientMeasureCallback
from capgeo_callbacks.measures.gradients import ForwardFn, LossFn
from capgeo_callbacks.measures.hessian import hessian_top_eigenvalues, hutchinson_trace


class HessianMonitor(GradientMeasureCallback):
    r"""Log the k largest eigenvalues of the loss Hessian (and optionally its trace) at evaluations.

    Lanczos with full reorthogonalisation on Hessian-vector products (double backward) of ``loss_fn``
    on a fixed batch of ``batch_size`` training examples, in eval mode and on the math attention path
    (fused attention kernels have no double backward); the start vector comes from a generator seeded
    with ``seed``, so the estimate is deterministic and the global RNG is untouched. With
    ``trace=True``, Hutchinson's estimate :math:`\mathrm{tr}(H) = E[v^T H v]` over ``trace_samples``
    Rademacher probes is added.

    Measured in ``on_validation_start`` on the weights the validation sees, out of inference mode on the
    cached batch; see :class:`~capgeo_callbacks.callbacks.base.GradientMeasureCallback`
    for the fixed batch, DDP and the no-observer-effect guarantees. Each evaluation costs up to
    ``num_iterations`` HVPs (about 2 to 4 training steps' worth of compute each), hence the sparse default
    ``every_n_evals``.

    Args:
        loss_fn: ``loss_fn(output, batch) -> scalar`` mean loss; default answer-masked cross-entropy, for
            capgeo's dict batches only.
        k: number of eigenvalues (descending).
        every_n_evals: measure at every n-th validation.
        batch_size: examples in the fixed batch.
        trace: also estimate the trace.
        num_iterations: Lanczos's HVP budget; default ``min(P, max(4k + 40, 60))``.
        forward: ``forward(module, batch) -> output``; default ``module(batch["input_ids"])`` for a dict
            batch, ``module(batch[0])`` for a tuple.
        trace_samples: Hutchinson probes.
        tol: Lanczos's relative residual tolerance for stopping early.
        seed: seed of the Lanczos start vector and the Hutchinson probes.

    Raises:
        ValueError: on a bad argument, or at the first training batch if ``loss_fn`` is not given and the
            batch is not a dict with ``input_ids``, ``targets`` and ``answer_mask``.

    Logged keys:
        ``hessian/eig_<i>`` for i = 0 .. k-1 (``eig_0`` the largest), and ``hessian/trace`` with
        ``trace=True``.

    Example::

        trainer = Trainer(callbacks=[HessianMonitor(k=3, every_n_evals=8, trace=True)])
    """

    def __init__(
        self,
        loss_fn: LossFn | None = None,
        k: int = 3,
        every_n_evals: int = 8,
        batch_size: int = 128,
        trace: bool = False,
        num_iterations: int | None = None,
        *,
        forward: ForwardFn | None = None,
        trace_samples: int = 64,
        tol: float = 1e-6,
        seed: int = 0,
    ) -> None:
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if num_iterations is not None and (not isinstance(num_iterations, int) or num_iterations < k):
            raise ValueError(f"num_iterations must be an integer >= k ({k}) or None, got {num_iterations!r}")
        if not isinstance(trace_samples, int) or trace_samples < 1:
            raise ValueError(f"trace_samples must be a positive integer, got {trace_samples!r}")
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol >= 0:
            raise ValueError(f"tol must be a non-negative number, got {tol!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        super().__init__(loss_fn, forward, batch_size, every_n_evals)
        self.k = k
        self.batch_size = batch_size
        self.trace = bool(trace)
        self.num_iterations = num_iterations
        self.trace_samples = trace_samples
        self.tol = tol
        self.seed = seed

    @cached_property  # Lightning reads it at every hook call (its profiler's name): formatted once
    def state_key(self) -> str:  # type: ignore[override]
        return self._generate_state_key(k=self.k, batch_size=self.batch_size, trace=self.trace,
                                        every_n_evals=self.every_n_evals)

    @property
    def tags(self) -> list[str]:
        """The logged tags."""
        return [f"hessian/eig_{i}" for i in range(self.k)] + (["hessian/trace"] if self.trace else [])

    @override
    def measure(self, pl_module: pl.LightningModule, batch: Any, step: int) -> dict[str, float]:
        params = [p for p in pl_module.parameters() if p.requires_grad]

        def loss_closure() -> torch.Tensor:
            return self.loss_fn(self.forward(pl_module, batch), batch)

        with torch.no_grad():
            loss = float(loss_closure())
        if not math.isfinite(loss):
            self.warn_once("nonfinite", f"non-finite loss ({loss}) at step {step}; skipped "
                           "(and at any later step where it is non-finite)")
            return {}
        k = min(self.k, sum(p.numel() for p in params))
        eigenvalues = self.call_quietly(
            step, hessian_top_eigenvalues, loss_closure, params, k, num_iterations=self.num_iterations,
            tol=self.tol, generator=torch.Generator().manual_seed(self.seed),
        )
        if not bool(torch.isfinite(eigenvalues).all()):
            self.warn_once("nonfinite-eig", f"non-finite Hessian eigenvalues at step {step} "
                           "(non-finite gradients); skipped (and at any later step where they are "
                           "non-finite)")
            return {}
        values = {f"hessian/eig_{i}": float(value) for i, value in enumerate(eigenvalues.tolist())}
        if self.trace:
            estimate = hutchinson_trace(loss_closure, params, self.trace_samples,
                                        generator=torch.Generator().manual_seed(self.seed + 1))
            values["hessian/trace"] = estimate.trace
        return values
