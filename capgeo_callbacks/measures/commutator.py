"""The commutator defect: how far two gradient steps fail to commute (docs/design.md, "Commutator defect").

For two batches A and B with mean losses L_A and L_B, gradients g_A and g_B and Hessians H_A and H_B at the weights
theta, a plain gradient step of size eta on A then on B ends at
theta_AB = theta - eta g_A(theta) - eta g_B(theta - eta g_A(theta)), and on B then A at theta_BA. The defect is

    D_eta = ||theta_AB - theta_BA|| / (eta^2 ||g_A|| ||g_B||)

(Xu 2026, arXiv 2602.16967). Since theta_AB - theta_BA = eta^2 (H_B g_A - H_A g_B) + O(eta^3), its small-step form is

    D = ||H_B g_A - H_A g_B|| / (||g_A|| ||g_B||),

which capgeo measures by default: two gradients with their graphs and one backward through both
(d/dtheta [g_B . g_A' - g_A . g_B'] with g_A', g_B' held constant is H_B g_A - H_A g_B), no step size to choose, and
no cancellation. The finite form subtracts two points that agree to within eta^2 of the weights' size: at eta = 1e-3
in float32 that difference is rounding, so :func:`commutator` computes it in float64. For quadratic losses
1/2 theta^T A theta and 1/2 theta^T B theta both forms equal ||(BA - AB) theta|| / (||A theta|| ||B theta||) exactly.

Neither form draws random numbers or touches the model: the gradients are taken with respect to detached copies of
the weights (``torch.func.functional_call``), so no ``.grad`` is written. Evaluate the model in eval mode (no
dropout) and outside ``torch.inference_mode``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call

from capgeo_callbacks.measures.batch import call_model, split_batch
from capgeo_callbacks.measures.gradients import ForwardFn, LossFn, _LossModule
from capgeo_callbacks.measures.hessian import math_sdpa

__all__ = ["Commutator", "commutator", "commutator_defect", "model_commutator", "parameter_loss"]

LossOfParameters = Callable[[Sequence[Tensor]], Tensor]
"""``loss(params) -> scalar``: a batch's mean loss at the weights ``params`` (a list shaped like the point)."""


@dataclass(frozen=True)
class Commutator:
    """What :func:`commutator` measured at one point for one pair of batches.

    Attributes:
        defect: the commutator defect (small-step form when ``step_size`` is None); NaN when a gradient is zero or
            not finite (the ratio is undefined).
        grad_norm_a: ||g_A||, float64.
        grad_norm_b: ||g_B||, float64.
        step_size: eta of the finite form, None for the small-step form.
    """

    defect: float
    grad_norm_a: float
    grad_norm_b: float
    step_size: float | None


def _norm(tensors: Sequence[Tensor]) -> float:
    return math.sqrt(sum(float(t.to(torch.float64).pow(2).sum()) for t in tensors))


def _gradient(loss: LossOfParameters, point: Sequence[Tensor], create_graph: bool = False) -> list[Tensor]:
    """The gradient of ``loss`` at ``point`` (zeros where the loss does not depend on a tensor), taken with respect to
    fresh leaves so nothing outside is written to."""
    leaves = [t.detach().requires_grad_(True) for t in point] if not create_graph else list(point)
    with torch.enable_grad():
        value = loss(leaves)
        if not isinstance(value, Tensor) or value.numel() != 1:
            raise ValueError(f"the loss must be a scalar tensor, got shape {tuple(getattr(value, 'shape', ()))}")
        grads = torch.autograd.grad(value.reshape(()), leaves, create_graph=create_graph, allow_unused=True)
    return [torch.zeros_like(leaf) if g is None else g for g, leaf in zip(grads, leaves, strict=True)]


def _small_step(loss_a: LossOfParameters, loss_b: LossOfParameters,
                params: Sequence[Tensor]) -> tuple[float, list[Tensor], list[Tensor]]:
    """||H_B g_A - H_A g_B|| and the two gradients, by one backward through both gradients' graphs."""
    point = [p.detach().requires_grad_(True) for p in params]
    g_a = _gradient(loss_a, point, create_graph=True)
    g_b = _gradient(loss_b, point, create_graph=True)
    with torch.enable_grad():
        # d/dtheta [g_B . const(g_A) - g_A . const(g_B)] = H_B g_A - H_A g_B
        bracket = sum(((b * a.detach()).sum() - (a * b.detach()).sum() for a, b in zip(g_a, g_b, strict=True)),
                      torch.zeros((), dtype=point[0].dtype, device=point[0].device))
        if bracket.requires_grad:
            pieces = torch.autograd.grad(bracket, point, allow_unused=True)
            difference = _norm([p for p in pieces if p is not None])
        else:  # both gradients constant in theta (linear losses): the steps commute
            difference = 0.0
    return difference, [g.detach() for g in g_a], [g.detach() for g in g_b]


def _finite_step(loss_a: LossOfParameters, loss_b: LossOfParameters, params: Sequence[Tensor],
                 step_size: float) -> tuple[float, list[Tensor], list[Tensor]]:
    """||theta_AB - theta_BA|| in float64 and the two gradients at theta."""
    theta = [p.detach().to(torch.float64) for p in params]
    g_a, g_b = _gradient(loss_a, theta), _gradient(loss_b, theta)
    after_a = [t - step_size * g for t, g in zip(theta, g_a, strict=True)]
    after_b = [t - step_size * g for t, g in zip(theta, g_b, strict=True)]
    theta_ab = [t - step_size * g for t, g in zip(after_a, _gradient(loss_b, after_a), strict=True)]
    theta_ba = [t - step_size * g for t, g in zip(after_b, _gradient(loss_a, after_b), strict=True)]
    return _norm([x - y for x, y in zip(theta_ab, theta_ba, strict=True)]), g_a, g_b


def commutator(loss_a: LossOfParameters, loss_b: LossOfParameters, params: Sequence[Tensor], *,
               step_size: float | None = None) -> Commutator:
    """The commutator defect of the losses of two batches at the point ``params``.

    With ``step_size`` None, the small-step form ||H_B g_A - H_A g_B|| / (||g_A|| ||g_B||) in the parameters' dtype
    (norms summed in float64). With a step size eta > 0, the finite form ||theta_AB - theta_BA|| /
    (eta^2 ||g_A|| ||g_B||), every step in float64: the losses must then accept float64 tensors. The two agree as eta
    falls (their difference is O(eta)).

    Args:
        loss_a: the mean loss of batch A as a function of the weights (a list shaped like ``params``).
        loss_b: the same for batch B.
        params: the point theta (not modified; detached copies are differentiated).
        step_size: eta of the finite form, or None for the small-step form.

    Returns:
        The defect (NaN when a gradient is zero or not finite) and both gradient norms.

    Raises:
        ValueError: no parameters, a step size that is not a positive finite number, or a loss that is not a scalar.
    """
    params = list(params)
    if not params:
        raise ValueError("params is empty: pass the tensors to differentiate, e.g. list(model.parameters())")
    if step_size is not None and (isinstance(step_size, bool) or not isinstance(step_size, (int, float))
                                  or not 0 < step_size < math.inf):
        raise ValueError(f"step_size must be a positive finite number (the finite form) or None (the small-step "
                         f"form), got {step_size!r}")
    if step_size is None:
        difference, g_a, g_b = _small_step(loss_a, loss_b, params)
        scale = 1.0
    else:
        difference, g_a, g_b = _finite_step(loss_a, loss_b, params, float(step_size))
        scale = float(step_size) ** 2
    norm_a, norm_b = _norm(g_a), _norm(g_b)
    denominator = scale * norm_a * norm_b
    defect = difference / denominator if denominator > 0 and math.isfinite(denominator) else math.nan
    return Commutator(defect=defect if math.isfinite(defect) else math.nan, grad_norm_a=norm_a, grad_norm_b=norm_b,
                      step_size=None if step_size is None else float(step_size))


def parameter_loss(model: nn.Module, loss_fn: LossFn, batch: Any, *, forward: ForwardFn | None = None,
                   dtype: torch.dtype | None = None) -> tuple[list[Tensor], LossOfParameters]:
    """``model``'s trainable weights (detached) and ``loss_fn(forward(model, batch), batch)`` as a function of them.

    The function calls the model through ``torch.func.functional_call`` with the weights it is given, so the module's
    own parameters are never written to. With ``dtype`` (float64 for the finite form), the frozen parameters, the
    floating buffers and the batch's floating tensors are cast to it too, and the weights returned are cast.

    Raises:
        ValueError: ``model`` has no parameter that requires grad.
    """
    forward = call_model if forward is None else forward
    named = list(model.named_parameters())
    names = [name for name, p in named if p.requires_grad]
    if not names:
        raise ValueError("model has no parameters with requires_grad=True")
    wrapper = _LossModule(model, loss_fn, forward)

    def cast(t: Tensor) -> Tensor:
        return t.detach().to(dtype) if dtype is not None and t.is_floating_point() else t

    fixed: dict[str, Tensor] = {}
    if dtype is not None:
        fixed = {f"model.{n}": cast(p) for n, p in named if not p.requires_grad}
        fixed |= {f"model.{n}": cast(b) for n, b in model.named_buffers()}
        leaves, rebuild = split_batch(batch)
        batch = rebuild([cast(leaf) for leaf in leaves])

    def loss(params: Sequence[Tensor]) -> Tensor:
        weights = dict(zip((f"model.{n}" for n in names), params, strict=True))
        return functional_call(wrapper, {**fixed, **weights}, (batch,))

    trainable = dict(named)
    return [cast(trainable[n]) if dtype is not None else trainable[n].detach() for n in names], loss


def model_commutator(model: nn.Module, loss_fn: LossFn, batch_a: Any, batch_b: Any, *,
                     forward: ForwardFn | None = None, step_size: float | None = None,
                     force_math_attention: bool = True) -> Commutator:
    """:func:`commutator` of ``model``'s loss on two batches, at its current weights (trainable parameters only).

    Args:
        model: the module (in eval mode, for a deterministic value); not modified.
        loss_fn: ``loss_fn(output, batch) -> scalar`` mean loss of a batch.
        batch_a: batch A (a tensor, mapping or tuple/list of tensors, as the other gradient measures take).
        batch_b: batch B.
        forward: ``forward(model, batch) -> output``; default ``model(batch)`` for a tensor, ``model(batch[0])`` for
            a tuple.
        step_size: eta of the finite form (computed in float64), or None for the small-step form.
        force_math_attention: run on PyTorch's math attention path (the fused kernels have no double backward).
    """
    dtype = None if step_size is None else torch.float64
    params, loss_a = parameter_loss(model, loss_fn, batch_a, forward=forward, dtype=dtype)
    _, loss_b = parameter_loss(model, loss_fn, batch_b, forward=forward, dtype=dtype)
    with math_sdpa() if force_math_attention else contextlib.nullcontext():
        return commutator(loss_a, loss_b, params, step_size=step_size)


def commutator_defect(model: nn.Module, loss_fn: LossFn, batch_a: Any, batch_b: Any, *,
                      forward: ForwardFn | None = None, step_size: float | None = None) -> float:
    """The commutator defect of ``model``'s loss on batches A and B at its current weights: the small-step form
    ||H_B g_A - H_A g_B|| / (||g_A|| ||g_B||) by default, the finite form in float64 with ``step_size``; NaN when a
    gradient is zero. See :func:`model_commutator` for the arguments."""
    return model_commutator(model, loss_fn, batch_a, batch_b, forward=forward, step_size=step_size).defect
