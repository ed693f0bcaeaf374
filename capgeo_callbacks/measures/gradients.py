"""Per-example gradients and the rank of the gradient matrix (docs/design.md, "Measures").

``per_example_gradients`` stacks one flattened loss gradient per example into G (B x P);
``gradient_effective_rank`` and ``gradient_covariance_rank`` summarise its spectrum through the
B x B Gram matrix, so that P (millions of weights) never enters a P x P matrix.

A batch, as for :mod:`capgeo_callbacks.measures.llc`, is a tensor, a mapping or a tuple/list whose tensor leaves
all have the batch as their leading dimension (:mod:`capgeo_callbacks.measures.batch`). ``forward(model, batch)``
computes the model output (default :func:`~capgeo_callbacks.measures.batch.call_model`) and
``loss_fn(output, batch)`` the scalar mean loss of the batch. Per-example gradients are the gradients of that loss
on one-example batches (every tensor leaf sliced to leading size 1), which is exactly what a loop of single-example
backward passes gives.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from capgeo_callbacks.measures.batch import batch_size_of, call_model, split_batch
from capgeo_callbacks.measures.rankme import effective_rank_from_singular_values

__all__ = [
    "gradient_covariance_rank",
    "gradient_effective_rank",
    "per_example_gradients",
]

LossFn = Callable[[Any, Any], Tensor]
"""``loss_fn(model_output, batch) -> scalar tensor`` (mean over the batch's examples)."""

ForwardFn = Callable[[nn.Module, Any], Any]
"""``forward(model, batch) -> model_output``."""

# Columns of G converted to float64 at a time when forming the Gram matrix (bounds the extra memory).
_GRAM_BLOCK_ELEMENTS = 1 << 23


class _LossModule(nn.Module):
    """``batch -> loss_fn(forward(model, batch), batch)`` as a module, so that ``functional_call``
    can swap ``model``'s parameters (under the ``model.`` prefix) whatever ``forward`` does."""

    def __init__(self, model: nn.Module, loss_fn: LossFn, forward: ForwardFn) -> None:
        super().__init__()
        self.model = model
        # Plain attributes (not submodules) even when loss_fn is an nn.Module.
        object.__setattr__(self, "_loss_fn", loss_fn)
        object.__setattr__(self, "_forward_fn", forward)

    def forward(self, batch: Any) -> Tensor:
        return self._loss_fn(self._forward_fn(self.model, batch), batch)


def per_example_gradients(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Any,
    *,
    forward: ForwardFn | None = None,
    chunk_size: int | None = None,
) -> Tensor:
    """Per-example loss gradients, flattened and stacked into G (B x P).

    Row i is ``d loss_fn(forward(model, batch_i), batch_i) / d theta`` for the one-example batch
    ``batch_i`` (every tensor leaf sliced to ``[i:i+1]``), flattened over ``model``'s parameters that
    require grad, concatenated in ``named_parameters()`` order. The mean of the rows is the gradient
    of the batch loss when ``loss_fn`` is a mean over examples.

    Computed with ``torch.func``: ``vmap(grad(functional_call(...)))`` over chunks of ``chunk_size``
    examples (all at once when ``None``). If vmap fails (in-place ops on captured tensors,
    data-dependent control flow, ...), falls back with a warning to a loop of one-example
    ``torch.autograd.grad`` calls, which gives the same result more slowly.

    Needs gradients: call it outside ``torch.inference_mode`` (it enables grad itself). Does not touch
    the model's parameters, their ``.grad``, its buffers (the forward sees copies) or
    ``model.training``; the model runs in whatever mode it is in (call ``model.eval()`` first for
    deterministic results: under vmap, dropout draws a different mask per example from the global
    RNG).

    Args:
        model: the module; only parameters with ``requires_grad`` are differentiated.
        loss_fn: ``loss_fn(output, batch) -> scalar`` mean loss of ``batch``.
        batch: a tensor, mapping or tuple/list of tensors with the batch as leading dimension
            (non-tensor and 0-d leaves are passed through unchanged).
        forward: ``forward(model, batch) -> output``; default
            :func:`~capgeo_callbacks.measures.batch.call_model` (``model(x)`` for ``(x, y)``).
        chunk_size: examples per vmap call, to bound memory; ``None`` for the whole batch.

    Returns:
        G, shape (B, P), in the parameters' dtype, on their device.

    Raises:
        ValueError: no trainable parameters, an empty batch, inconsistent leading dimensions, a bad
            ``chunk_size``, or a ``loss_fn`` that does not return a scalar.
    """
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size}")
    forward = call_model if forward is None else forward
    named = list(model.named_parameters())
    trainable = {name: p.detach() for name, p in named if p.requires_grad}
    if not trainable:
        raise ValueError("model has no parameters with requires_grad=True")
    frozen = {name: p.detach() for name, p in named if not p.requires_grad}
    names = list(trainable)
    wrapper = _LossModule(model, loss_fn, forward)
    # Buffers go in as copies: a forward that updates them in place (BatchNorm running statistics,
    # counters) then leaves the model's own buffers alone.
    constants = frozen | {name: b.detach().clone() for name, b in model.named_buffers()}

    leaves, rebuild = split_batch(batch)
    num_examples = batch_size_of(batch)
    if num_examples == 0:
        raise ValueError("batch is empty (leading dimension 0)")
    step = num_examples if chunk_size is None else chunk_size

    def loss_of(params: dict[str, Tensor], fixed: dict[str, Tensor], example_leaves: list[Tensor]) -> Tensor:
        example = rebuild(example_leaves)
        tensors = {f"model.{n}": p for n, p in (params | fixed).items()}
        loss = functional_call(wrapper, tensors, (example,))
        if not isinstance(loss, Tensor) or loss.numel() != 1:
            raise ValueError(
                f"loss_fn must return a scalar tensor, got {type(loss).__name__} "
                f"of shape {tuple(getattr(loss, 'shape', ()))}"
            )
        return loss.reshape(())

    def one_example_loss(
        params: dict[str, Tensor], fixed: dict[str, Tensor], example_leaves: list[Tensor]
    ) -> Tensor:
        return loss_of(params, fixed, [leaf.unsqueeze(0) for leaf in example_leaves])

    # Frozen parameters and buffers are arguments (not captured), so in-place buffer updates that
    # do not depend on the example (counters) stay vmap-compatible.
    per_example_grad = vmap(grad(one_example_loss), in_dims=(None, None, 0), randomness="different")

    def flatten(grads: dict[str, Tensor], rows: int) -> Tensor:
        return torch.cat([grads[n].reshape(rows, -1) for n in names], dim=1)

    chunks: list[Tensor] = []
    with torch.enable_grad():
        try:
            for start in range(0, num_examples, step):
                chunk_leaves = [leaf[start : start + step] for leaf in leaves]
                rows = chunk_leaves[0].shape[0]
                chunks.append(flatten(per_example_grad(trainable, constants, chunk_leaves), rows))
        except ValueError:
            raise
        except (RuntimeError, NotImplementedError, TypeError) as error:
            warnings.warn(
                f"per_example_gradients: vmap failed ({type(error).__name__}: {str(error)[:200]}); "
                "falling back to a per-example loop (same result, slower)",
                RuntimeWarning,
                stacklevel=2,
            )
            chunks = [_per_example_loop(loss_of, trainable, constants, leaves, num_examples, names)]
    return torch.cat(chunks, dim=0)


def _per_example_loop(
    loss_of: Callable[[dict[str, Tensor], dict[str, Tensor], list[Tensor]], Tensor],
    trainable: dict[str, Tensor],
    constants: dict[str, Tensor],
    leaves: list[Tensor],
    num_examples: int,
    names: list[str],
) -> Tensor:
    """The fallback: one ``torch.autograd.grad`` per example on leaf copies of the parameters."""
    params = {n: p.detach().requires_grad_(True) for n, p in trainable.items()}
    inputs = [params[n] for n in names]
    rows = []
    for i in range(num_examples):
        loss = loss_of(params, constants, [leaf[i : i + 1] for leaf in leaves])
        grads = torch.autograd.grad(loss, inputs, allow_unused=True)
        flat = [
            (torch.zeros_like(p) if g is None else g).reshape(-1) for g, p in zip(grads, inputs, strict=True)
        ]
        rows.append(torch.cat(flat))
    return torch.stack(rows)


def _check_grads(grads: Tensor) -> None:
    if not isinstance(grads, Tensor) or grads.dim() != 2:
        shape = tuple(getattr(grads, "shape", ()))
        raise ValueError(f"grads must be a 2-D tensor (B x P), got shape {shape}")
    if grads.shape[0] == 0 or grads.shape[1] == 0:
        raise ValueError(f"grads must be non-empty, got shape {tuple(grads.shape)}")


def _gram64(g: Tensor) -> Tensor:
    """G G^T (B x B) in float64, converting a block of columns at a time."""
    rows, cols = g.shape
    block = max(1, _GRAM_BLOCK_ELEMENTS // rows)
    gram = torch.zeros(rows, rows, dtype=torch.float64, device=g.device)
    for start in range(0, cols, block):
        part = g[:, start : start + block].to(torch.float64)
        gram.addmm_(part, part.T)
    return gram


def _singular_values(g: Tensor, *, centre: bool = False) -> Tensor:
    """Singular values (descending, float64) of G, or of G centred over rows when ``centre``.

    Via the eigenvalues of the float64 Gram matrix G G^T (B x B); centring is done on the Gram
    matrix, Gc Gc^T = J G G^T J with J = I - 11^T / B, so no float64 copy of G is made. For float64
    input the SVD of G itself is used instead: the Gram matrix squares the condition number, which
    float64 cannot resolve below ``sqrt(eps64)`` relative (a float32 G carries no information that fine
    anyway). Neither path forms a P x P matrix.
    """
    if g.dtype == torch.float64:
        return torch.linalg.svdvals(g - g.mean(dim=0, keepdim=True) if centre else g)
    gram = _gram64(g)
    if centre:
        row_mean = gram.mean(dim=1, keepdim=True)
        gram = gram - row_mean - row_mean.T + row_mean.mean()
    eigenvalues = torch.linalg.eigvalsh(gram)
    return eigenvalues.clamp_min(0.0).sqrt().flip(0)


def _effective_rank(s: Tensor) -> float:
    """Roy and Vetterli (2007): exp(-sum_k p_k log p_k), p_k = s_k / sum_j s_j (0 log 0 = 0); 0.0 if s = 0."""
    s = s.to(torch.float64).clamp_min(0.0)
    total = float(s.sum())
    if not math.isfinite(total):
        return math.nan
    if total <= 0.0:
        return 0.0
    return effective_rank_from_singular_values(s)


def gradient_effective_rank(grads: Tensor) -> float:
    """Effective rank (Roy and Vetterli, 2007) of the per-example gradient matrix G (B x P).

    erank(G) = exp(-sum_k p_k log p_k), p_k = s_k / sum_j s_j, where s are the singular values of G,
    obtained as the square roots of the eigenvalues of the Gram matrix G G^T (B x B, float64).
    It lies in [1, min(B, P)]; 0.0 for G = 0 and NaN for non-finite G.

    Pure tensor function: needs no gradients.

    Raises:
        ValueError: ``grads`` is not a non-empty 2-D tensor.
    """
    _check_grads(grads)
    if not bool(torch.isfinite(grads).all()):
        return math.nan
    return _effective_rank(_singular_values(grads))


def gradient_covariance_rank(grads: Tensor) -> tuple[float, int]:
    """Effective and numerical rank of the per-example gradient covariance.

    G is centred over examples, Gc = G - mean_i G_i. The spectrum used is the singular values s of
    Gc (from the eigenvalues of the float64 Gram matrix Gc Gc^T, B x B; the covariance
    Gc^T Gc / (B - 1) has eigenvalues s^2 / (B - 1), which have the same numerical rank):

    - effective rank: exp(-sum_k p_k log p_k), p_k = s_k / sum_j s_j (Roy and Vetterli, as in
      :func:`gradient_effective_rank`, on the singular values, not their squares);
    - numerical rank: #{k : s_k > max(s) * B * eps}, eps = ``torch.finfo(grads.dtype).eps`` (the
      precision G was computed in, as ``torch.linalg.matrix_rank``; float64 eps would count float32
      rounding noise as rank).

    Centring removes one direction, so both are at most min(B - 1, P); (0.0, 0) when B = 1 or all
    rows are equal; (NaN, 0) for non-finite G.

    Pure tensor function: needs no gradients.

    Raises:
        ValueError: ``grads`` is not a non-empty 2-D tensor.
    """
    _check_grads(grads)
    if not bool(torch.isfinite(grads).all()):
        return math.nan, 0
    s = _singular_values(grads, centre=True)
    s_max = float(s.max())
    if s_max <= 0.0:
        return 0.0, 0
    eps = torch.finfo(grads.dtype).eps if grads.dtype.is_floating_point else torch.finfo(torch.float64).eps
    numerical_rank = int((s > s_max * grads.shape[0] * eps).sum())
    return _effective_rank(s), numerical_rank
