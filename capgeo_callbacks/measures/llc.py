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
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from capgeo_callbacks.batches import batch_size_of, default_forward, to_device
from capgeo_callbacks.measures.gradients import ForwardFn, LossFn, _LossModule

__all__ = ["VMAP_MAX_PARAMETERS", "default_nbeta", "estimate_llc"]

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


def _cycle(loader: Iterable[Any]) -> Iterator[Any]:
    """Iterate ``loader`` forever, re-iterating it (reshuffling) at each pass, without caching."""
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise ValueError("dataloader yielded no batches")


def _loader_length(loader: Iterable[Any]) -> int | None:
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return None


class _FlatParameters:
    """Map between a model's trainable parameters and one flat vector (in a common dtype)."""

    def __init__(self, model: nn.Module) -> None:
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError("model has no parameters with requires_grad=True")
        self.names = [f"model.{name}" for name, _ in named]
        self.params = [p for _, p in named]
        self.shapes = [p.shape for _, p in named]
        self.dtypes = [p.dtype for _, p in named]
        self.numels = [p.numel() for _, p in named]
        dtype = self.dtypes[0]
        for other in self.dtypes[1:]:
            dtype = torch.promote_types(dtype, other)
        self.dtype = dtype
        self.initial = torch.cat([p.detach().reshape(-1).to(dtype) for _, p in named])

    def unflatten(self, flat: Tensor) -> dict[str, Tensor]:
        pieces = flat.split(self.numels)
        return {
            name: piece.reshape(shape).to(dtype)
            for name, piece, shape, dtype in zip(self.names, pieces, self.shapes, self.dtypes, strict=True)
        }

    def bind(self, flat: Tensor) -> bool:
        """Make the module's parameters views into ``flat`` (in place), if they all share its dtype.

        Then an in-place update of ``flat`` is an update of the module, with no copy per step.
        Returns False (nothing changed) for mixed dtypes; :meth:`load` copies instead.
        """
        if any(dtype != flat.dtype for dtype in self.dtypes):
            return False
        for param, piece, shape in zip(self.params, flat.split(self.numels), self.shapes, strict=True):
            param.data = piece.view(shape)
        return True

    @torch.no_grad()
    def load(self, flat: Tensor) -> None:
        """Copy ``flat`` into the module's parameters (the mixed-dtype case of :meth:`bind`)."""
        for param, value in zip(self.params, self.unflatten(flat).values(), strict=True):
            param.copy_(value)


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
            :func:`~capgeo_callbacks.measures.gradients.default_forward`.
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
    for name, value in (
        ("num_chains", num_chains),
        ("num_draws", num_draws),
        ("num_steps_bw_draws", num_steps_bw_draws),
    ):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if num_burnin_steps < 0:
        raise ValueError(f"num_burnin_steps must be non-negative, got {num_burnin_steps}")
    if not lr > 0:
        raise ValueError(f"lr (eps) must be positive, got {lr}")
    if localization < 0:
        raise ValueError(f"localization (gamma) must be non-negative, got {localization}")
    forward = default_forward if forward is None else forward
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


class _Settings:
    def __init__(
        self,
        *,
        num_draws: int,
        num_burnin_steps: int,
        num_steps_bw_draws: int,
        lr: float,
        localization: float,
        nbeta: float,
        loss_limit: float,
    ) -> None:
        self.num_draws = num_draws
        self.num_burnin_steps = num_burnin_steps
        self.num_steps_bw_draws = num_steps_bw_draws
        self.num_steps = num_draws * num_steps_bw_draws + num_burnin_steps
        self.lr = lr
        self.localization = localization
        self.nbeta = nbeta
        self.loss_limit = loss_limit

    def draw_index(self, step: int) -> int | None:
        """The draw recorded at SGLD step ``step`` (0-based), or None (devinterp's rule)."""
        after_burnin = step - self.num_burnin_steps
        if after_burnin >= 0 and (after_burnin + 1) % self.num_steps_bw_draws == 0:
            return after_burnin // self.num_steps_bw_draws
        return None


def _initial_loss(wrapper: nn.Module, loader: Iterable[Any], num_chains: int, device: torch.device) -> float:
    """Mean batch loss at w* over the first min(num_chains, len(loader)) batches (devinterp)."""
    length = _loader_length(loader)
    num_batches = num_chains if length is None else min(num_chains, length)
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in loader:
            if count == num_batches:
                break
            total += float(wrapper(to_device(batch, device)))
            count += 1
    if count == 0:
        raise ValueError("dataloader yielded no batches")
    return total / count


@torch.no_grad()
def _sgld_update_(weights: Tensor, grads: Tensor, noise: Tensor, w_star: Tensor, drift: Tensor, s: _Settings) -> None:
    """In place: w <- w - (eps / 2) (nbeta grad + gamma (w - w*)) + sqrt(eps) noise (``drift`` is scratch)."""
    torch.sub(weights, w_star, out=drift)
    drift.mul_(s.localization).add_(grads, alpha=s.nbeta)
    weights.add_(drift, alpha=-0.5 * s.lr).add_(noise, alpha=math.sqrt(s.lr))


# Steps between checks for chains that have all diverged (each check synchronises with the device).
_DIVERGENCE_CHECK_EVERY = 32


class _Losses:
    """Every step's batch loss, kept on the device (no synchronisation per step), and the divergence
    checks over the steps since the previous check."""

    def __init__(self, s: _Settings, num_chains: int | None, device: torch.device) -> None:
        shape = (s.num_steps,) if num_chains is None else (s.num_steps, num_chains)
        self.values = torch.full(shape, math.nan, dtype=torch.float64, device=device)
        self.bad = torch.zeros(shape[1:], dtype=torch.bool, device=device)
        self.settings = s
        self.checked = 0

    def record(self, step: int, loss: Tensor) -> None:
        self.values[step] = loss.detach()

    def all_diverged(self, step: int, weights: Tensor) -> bool:
        """Every ``_DIVERGENCE_CHECK_EVERY`` steps: whether every chain has had a non-finite or
        exploding loss, or has non-finite weights (which stay non-finite under SGLD)."""
        if (step + 1) % _DIVERGENCE_CHECK_EVERY:
            return False
        window = self.values[self.checked : step + 1]
        self.checked = step + 1
        self.bad |= ~(torch.isfinite(window) & (window <= self.settings.loss_limit)).all(dim=0)
        self.bad |= ~torch.isfinite(weights).all(dim=-1)
        return bool(self.bad.all())

    def traces(self) -> Tensor:
        """The recorded draws, (chains, draws) or (draws,), on the CPU (NaN after an early stop)."""
        steps = [step for step in range(self.settings.num_steps) if self.settings.draw_index(step) is not None]
        return self.values[steps].t().cpu()


def _run_vectorized(
    wrapper: nn.Module,
    flat: _FlatParameters,
    loader: Iterable[Any],
    generators: list[torch.Generator],
    s: _Settings,
    device: torch.device,
) -> Tensor:
    """All chains at once: W (C x P), per-chain loss and gradient by vmap(grad_and_value)."""
    num_chains = len(generators)
    w_star = flat.initial.to(device)
    weights = w_star.expand(num_chains, -1).clone()
    noise, drift = torch.empty_like(weights), torch.empty_like(weights)
    losses = _Losses(s, num_chains, device)

    def chain_loss(w: Tensor, batch: Any) -> Tensor:
        return functional_call(wrapper, flat.unflatten(w), (batch,)).reshape(())

    loss_and_grad = vmap(grad_and_value(chain_loss), in_dims=(0, None), randomness="different")
    for step, batch in zip(range(s.num_steps), _cycle(loader), strict=False):
        grads, loss = loss_and_grad(weights, to_device(batch, device))
        for row, generator in zip(noise, generators, strict=True):
            row.normal_(generator=generator)  # = torch.randn(P, generator=generator)
        _sgld_update_(weights, grads.detach(), noise, w_star, drift, s)
        losses.record(step, loss)
        if losses.all_diverged(step, weights):
            break
    return losses.traces()


def _run_sequential(
    wrapper: nn.Module,
    flat: _FlatParameters,
    loader: Iterable[Any],
    generators: list[torch.Generator],
    s: _Settings,
    device: torch.device,
) -> Tensor:
    """Chains one after another, each iterating the loader itself, with plain autograd on the copy.

    The copy's parameters are made views into one flat weight vector (when they share a dtype), so
    that the SGLD step is a few in-place operations on flat buffers allocated once.
    """
    w_star = flat.initial.to(device)
    weights = w_star.clone()
    bound = flat.bind(weights)
    grads, noise, drift = torch.empty_like(weights), torch.empty_like(weights), torch.empty_like(weights)
    zeros: dict[int, Tensor] = {}
    traces = []
    for generator in generators:
        with torch.no_grad():
            weights.copy_(w_star)
        losses = _Losses(s, None, device)
        for step, batch in zip(range(s.num_steps), _cycle(loader), strict=False):
            if not bound:
                flat.load(weights)
            loss = wrapper(to_device(batch, device)).reshape(())
            parts = torch.autograd.grad(loss, flat.params, allow_unused=True)
            with torch.no_grad():
                pieces = [
                    part.reshape(-1)
                    if part is not None
                    else zeros.setdefault(i, weights.new_zeros(flat.numels[i]))
                    for i, part in enumerate(parts)
                ]
                torch.cat(pieces, out=grads)
                noise.normal_(generator=generator)  # = torch.randn(P, generator=generator)
                _sgld_update_(weights, grads, noise, w_star, drift, s)
            losses.record(step, loss)
            if losses.all_diverged(step, weights):
                break
        traces.append(losses.traces())
    return torch.stack(traces)


def _summarise(traces: Tensor, init_loss: float, s: _Settings, vectorized: bool) -> dict[str, Any]:
    finite_rows = torch.isfinite(traces).all(dim=1)
    diverged = ~finite_rows | (traces > s.loss_limit).any(dim=1)
    llc_per_chain = s.nbeta * (traces.mean(dim=1) - init_loss)
    llc_per_chain[diverged] = math.nan
    good = llc_per_chain[~diverged]
    llc_mean = float(good.mean()) if good.numel() else math.nan
    llc_std = float(good.std()) if good.numel() > 1 else math.nan
    finite_draws = traces[torch.isfinite(traces)]
    fraction_below = float((finite_draws < init_loss).double().mean()) if finite_draws.numel() else math.nan
    if bool(diverged.any()):
        warnings.warn(
            f"estimate_llc: {int(diverged.sum())} of {traces.shape[0]} SGLD chains diverged (non-finite or "
            "exploding loss); they are left out of llc_mean. Lower lr (eps) or raise localization (gamma).",
            RuntimeWarning,
            stacklevel=3,
        )
    if llc_mean < 0:
        warnings.warn(
            f"estimate_llc: negative LLC estimate ({llc_mean:.4g}): the weights are probably not at a local "
            f"minimum (fraction of draws below the initial loss: {fraction_below:.2f}), or eps is too large.",
            RuntimeWarning,
            stacklevel=3,
        )
    return {
        "llc_mean": llc_mean,
        "llc_std": llc_std,
        "llc_per_chain": llc_per_chain,
        "loss_trace": traces,
        "init_loss": float(init_loss),
        "fraction_below_init": fraction_below,
        "diverged": diverged,
        "nbeta": s.nbeta,
        "vectorized": vectorized,
    }
