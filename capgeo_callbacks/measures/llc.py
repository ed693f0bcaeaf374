"""Local learning coefficient by SGLD (docs/design.md, "Measures"), following devinterp 1.x's conventions.

lambda_hat = nbeta * (E_w[L_batch(w)] - L(w*)), where w is drawn by SGLD localized at the current
weights w*::

    w <- w - (eps / 2) * (nbeta * grad L_batch(w) + gamma * (w - w*)) + N(0, eps)

(Lau et al., 2023; devinterp's ``SGLD`` with ``noise_level=1`` and no weight decay). As in
``devinterp.slt.estimate_learning_coeff_with_summary``:

- nbeta = n * beta defaults to b / log b for the dataloader batch size b (``default_nbeta``);
- L(w*) (``init_loss``) is the mean batch loss at w* over the first ``min(num_chains, len(loader))``
  batches (``get_init_loss_multi_batch``);
- each step computes the batch loss at the current w and then moves w; a draw records that loss, for
  steps ``i >= num_burnin_steps`` with ``(i + 1 - num_burnin_steps) % num_steps_bw_draws == 0`` (so with
  no burn-in the first draw is the loss at w* itself);
- E_w is the mean over a chain's draws; ``llc_mean`` and ``llc_std`` (ddof 1) are over chains;
- the model runs in train mode (``train_mode=True``) for both the initial loss and the sampling.

Unlike devinterp, sampling never touches the global RNG (noise comes from one ``torch.Generator``
per chain; data-loader shuffling and dropout run inside ``torch.random.fork_rng``). For tiny models
(at most ``VMAP_MAX_PARAMETERS`` trainable parameters) the chains run by default as one batched
computation (``torch.func.vmap`` over stacked weights), much faster there; larger models run the
chains one after another on the copy itself, whose parameters are views into one flat weight vector
so that each SGLD step is a few in-place operations on buffers allocated once.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from capgeo_callbacks.measures.batch import batch_size_of, call_model
from capgeo_callbacks.measures.gradients import ForwardFn, LossFn, _LossModule
from capgeo_callbacks.measures.sgld import (
    _FlatParameters,
    _initial_loss,
    _run_sequential,
    _run_vectorized,
    _Settings,
    _summarise,
)

__all__ = ["VMAP_MAX_PARAMETERS", "check_sampler", "default_nbeta", "estimate_llc"]

# estimate_llc(vectorize=None) batches the chains with vmap up to this many trainable parameters.
VMAP_MAX_PARAMETERS = 2**12


def default_nbeta(batch_size: int) -> float:
    """devinterp's default inverse temperature n * beta = b / log b for batch size b (1.0 if b <= 1)."""
    if batch_size <= 1:
        warnings.warn(
            "default nbeta is undefined for batch size <= 1; using nbeta = 1", RuntimeWarning, stacklevel=2
        )
        return 1.0
    return batch_size / math.log(batch_size)


def check_sampler(*, num_chains: int, num_draws: int, lr: float, localization: float, nbeta: float | None,
                  seed: int) -> None:
    """The SGLD settings of :func:`estimate_llc`, checked where they are given (the monitor checks them before
    training).

    Raises:
        ValueError: naming the setting that is wrong and what it must be.
    """
    for name, value in (("num_chains", num_chains), ("num_draws", num_draws)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr (the SGLD step size eps) must be a positive number, got {lr!r}")
    if not (isinstance(localization, (int, float)) and math.isfinite(localization) and localization >= 0):
        raise ValueError(f"localization (gamma) must be a non-negative number, got {localization!r}")
    if nbeta is not None and not (isinstance(nbeta, (int, float)) and math.isfinite(nbeta) and nbeta > 0):
        raise ValueError(f"nbeta must be a positive number or None, got {nbeta!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")


def estimate_llc(
    model: nn.Module,
    loss_fn: LossFn,
    dataloader: Iterable[Any],
    *,
    num_chains: int = 4,
    num_draws: int = 200,
    num_burnin_steps: int = 0,
    num_steps_bw_draws: int = 1,
    lr: float = 1e-4,
    localization: float = 100.0,
    nbeta: float | None = None,
    init_loss: float | None = None,
    seed: int = 0,
    device: torch.device | str | None = None,
    forward: ForwardFn | None = None,
    train_mode: bool = True,
    vectorize: bool | None = None,
    divergence_threshold: float = 1e3,
) -> dict[str, Any]:
    """Estimate the local learning coefficient of ``model`` at its current weights w* by SGLD.

    lambda_hat = nbeta * (mean over draws of L_batch(w) - L(w*)) per chain, with w sampled by SGLD
    from the tempered posterior localized at w*, exp(-nbeta L(w) - gamma/2 ||w - w*||^2)::

        w <- w - (eps / 2) * (nbeta * grad L_batch(w) + gamma * (w - w*)) + N(0, eps)

    Conventions (init loss, which loss a draw records, train mode, default nbeta) are devinterp
    1.x's, listed in the module docstring, so that the result agrees with
    ``devinterp.slt.estimate_learning_coeff_with_summary`` on the same settings.

    Sampling runs on a deep copy of ``model``: the model's weights, ``.grad``, training flag and the
    global RNG state are left as they were. Each chain draws its noise from its own
    ``torch.Generator`` seeded from ``seed`` (``numpy.random.SeedSequence(seed)``, as devinterp).
    With ``vectorize=True`` all chains step together on the same sequence of batches (one pass over
    the loader per epoch, shared by the chains); with ``vectorize=False``, or when vmap fails on the
    model (the fallback warns), chains run one after another, each iterating the loader itself (as
    devinterp). For a full-batch or unshuffled loader the two give the same result. The default,
    ``vectorize=None``, picks by a fixed rule: batched when the model has at most
    ``VMAP_MAX_PARAMETERS`` (4096) trainable parameters, sequential above. Tiny models are
    dominated by per-operation overhead, which batching the chains divides by their number (3x on
    a 5-parameter regression); from a few thousand parameters the arithmetic dominates, the two
    paths are within noise of each other on MLPs (1K to 300K parameters, batch 128, one CPU
    thread), and vmap is slower on transformers (batched element-wise kernels, and a per-chain loop
    for operators without a batching rule, such as CPU fused attention): on capgeo's smallest
    transformer (415K parameters) sequential chains are about 15% faster.

    A chain is flagged ``diverged`` when a recorded loss or its weights become non-finite, or a loss
    exceeds ``init_loss + divergence_threshold * max(|init_loss|, 1)``; diverged chains are left out of
    ``llc_mean``/``llc_std`` (their ``llc_per_chain`` is NaN) and a warning is issued. A negative
    ``llc_mean`` (w* is not a local minimum, or eps is too large) also warns.

    Needs gradients: call it outside ``torch.inference_mode`` (it enables grad itself).

    Args:
        model: the trained module; only its parameters with ``requires_grad`` are sampled.
        loss_fn: ``loss_fn(output, batch) -> scalar`` mean loss of a batch.
        dataloader: an iterable of batches (a ``DataLoader``, or a list for full batch); batches are
            tensors, mappings or tuples, as in :mod:`capgeo_callbacks.measures.gradients`.
        num_chains: independent SGLD chains.
        num_draws: draws per chain.
        num_burnin_steps: SGLD steps discarded before the first draw.
        num_steps_bw_draws: SGLD steps per draw.
        lr: the step size eps.
        localization: gamma, the strength of the pull back to w*.
        nbeta: n * beta; default b / log b for the loader's batch size b (``dataloader.batch_size``,
            else the leading dimension of its first batch).
        init_loss: L(w*); default the mean loss over the first ``min(num_chains, len(loader))``
            batches, as devinterp.
        seed: seed of the chains' noise generators.
        device: where to sample; default the device of the model's first parameter.
        forward: ``forward(model, batch) -> output``; default
            :func:`~capgeo_callbacks.measures.batch.call_model` (``model(x)`` for ``(x, y)``).
        train_mode: run the copy in train mode (devinterp) or eval mode (no dropout).
        vectorize: batch the chains with ``torch.func.vmap`` (True), run them one after another
            (False), or choose by the parameter count (None, the default; see above).
        divergence_threshold: loss increase, in units of ``max(|init_loss|, 1)``, that flags a chain.

    Returns:
        A dict with ``llc_mean`` (float), ``llc_std`` (float, over chains, ddof 1; NaN with fewer
        than two finite chains), ``llc_per_chain`` (float64 tensor (C,)), ``loss_trace`` (float64
        tensor (C, D)), ``init_loss`` (float), ``fraction_below_init`` (float: the fraction of finite
        draws whose loss is below ``init_loss``; much above 0.5 means w* is not a local minimum),
        ``diverged`` (bool tensor (C,)), ``nbeta`` (float), ``vectorized`` (bool, which path ran).

    Raises:
        ValueError: non-positive counts or step size, negative localization, an empty loader or a
            model without trainable parameters.
    """
    check_sampler(num_chains=num_chains, num_draws=num_draws, lr=lr, localization=localization, nbeta=nbeta, seed=seed)
    if isinstance(num_steps_bw_draws, bool) or not isinstance(num_steps_bw_draws, int) or num_steps_bw_draws < 1:
        raise ValueError(f"num_steps_bw_draws must be an integer >= 1, got {num_steps_bw_draws!r}")
    if num_burnin_steps < 0:
        raise ValueError(f"num_burnin_steps must be non-negative, got {num_burnin_steps}")
    forward = call_model if forward is None else forward
    if device is None:
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
    device = torch.device(device)

    fork_devices = (
        [device.index if device.index is not None else torch.cuda.current_device()]
        if device.type == "cuda"
        else []
    )
    with torch.random.fork_rng(devices=fork_devices), torch.enable_grad():
        sampler = copy.deepcopy(model).to(device)
        sampler.train(train_mode)
        for p in sampler.parameters():
            p.grad = None
        flat = _FlatParameters(sampler)
        wrapper = _LossModule(sampler, loss_fn, forward)

        if nbeta is None:
            batch_size = getattr(dataloader, "batch_size", None)
            if batch_size is None:
                first_batch = next(iter(dataloader), None)
                if first_batch is None:
                    raise ValueError("dataloader yielded no batches")
                batch_size = batch_size_of(first_batch)
            nbeta = default_nbeta(int(batch_size))
        if init_loss is None:
            init_loss = _initial_loss(wrapper, dataloader, num_chains, device)

        seeds = np.random.SeedSequence(seed).generate_state(num_chains)
        generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
        settings = _Settings(
            num_draws=num_draws,
            num_burnin_steps=num_burnin_steps,
            num_steps_bw_draws=num_steps_bw_draws,
            lr=lr,
            localization=localization,
            nbeta=float(nbeta),
            loss_limit=init_loss + divergence_threshold * max(abs(init_loss), 1.0),
        )
        if vectorize is None:
            vectorize = flat.initial.numel() <= VMAP_MAX_PARAMETERS
        traces: Tensor | None = None
        vectorized = False
        if vectorize:
            try:
                traces = _run_vectorized(wrapper, flat, dataloader, generators, settings, device)
                vectorized = True
            except (RuntimeError, NotImplementedError, TypeError) as error:
                warnings.warn(
                    f"estimate_llc: vmap over chains failed ({type(error).__name__}: {str(error)[:200]}); "
                    "running the chains one after another",
                    RuntimeWarning,
                    stacklevel=2,
                )
        if traces is None:
            traces = _run_sequential(wrapper, flat, dataloader, generators, settings, device)
    return _summarise(traces, init_loss, settings, vectorized)


