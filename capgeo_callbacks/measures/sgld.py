"""The SGLD chains behind :func:`~capgeo_callbacks.measures.llc.estimate_llc`: flat weights, the update, the
vectorised and sequential samplers and the summary of their loss traces (the conventions are llc.py's)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from capgeo_callbacks.measures.batch import to_device

# Nothing here touches the global RNG: noise comes from one torch.Generator per chain.


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
