r"""LLC monitor
===========

The local learning coefficient (Lau et al., 2023) of the current weights by SGLD. Each estimate costs ``num_draws``
SGLD steps of ``num_chains`` forward-backward passes on one batch: with the defaults, about 800 training steps' worth of
compute, hence the sparse default ``every_n_evals``.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Iterator
from functools import cached_property
from typing import Any

import lightning.pytorch as pl
from torch import nn
from typing_extensions import override

from capgeo_callbacks.callbacks.base import GradientMeasureCallback
from capgeo_callbacks.capture.batches import batch_size_of, slice_batch
from capgeo_callbacks.measures.gradients import ForwardFn, LossFn
from capgeo_callbacks.measures.llc import check_sampler, estimate_llc
from capgeo_callbacks.run.failures import check_positive_int

# estimate_llc's own defaults for the sampler's settings, read from its signature: one place says them
SAMPLER = {name: parameter.default for name, parameter in inspect.signature(estimate_llc).parameters.items()
           if parameter.kind is inspect.Parameter.KEYWORD_ONLY}


@contextlib.contextmanager
def detached_from_trainer(module: nn.Module) -> Iterator[nn.Module]:
    """``module`` with the Trainer (and Fabric) references of its LightningModules cleared through their public
    setters, so that a ``copy.deepcopy`` copies the network only, not the Trainer with its loaders and loggers;
    restored afterwards (parents first: a parent's setter reaches its children, which then get their own back)."""
    lightning = [sub for sub in module.modules() if isinstance(sub, pl.LightningModule)]
    fabrics = [sub.fabric for sub in lightning]
    # under a Fabric, ``trainer`` reads as a shim over it: there is no Trainer to keep
    trainers = [_attached_trainer(sub) if fabric is None else None
                for sub, fabric in zip(lightning, fabrics, strict=True)]
    try:
        for sub in lightning:
            sub.fabric = None
            sub.trainer = None
        yield module
    finally:
        for sub, fabric, trainer in zip(lightning, fabrics, trainers, strict=True):
            sub.trainer = trainer
            sub.fabric = fabric


def _attached_trainer(module: pl.LightningModule) -> pl.Trainer | None:
    try:
        return module.trainer
    except RuntimeError:  # "not attached to a `Trainer`"
        return None


class LLCMonitor(GradientMeasureCallback):
    r"""Log the local learning coefficient of the current weights, estimated by SGLD, at evaluations.

    :math:`\hat\lambda = n\beta\,(E_w[L(w)] - L(w^*))` with w drawn by SGLD localized at the current
    weights :math:`w^*`, :math:`w \leftarrow w - \frac{\epsilon}{2}(n\beta \nabla L_b(w) + \gamma (w - w^*))
    + N(0, \epsilon)`, by :func:`~capgeo_callbacks.measures.llc.estimate_llc` (devinterp 1.x conventions;
    chains run together under ``vmap``). The data are a fixed set of ``num_batches`` batches of
    ``batch_size`` training examples (the first ones seen), cycled by the chains; nβ defaults to
    b / log b for b = ``batch_size``; the chains' noise generators are seeded with ``seed``.

    Sampling runs on a deep copy of the module (its Trainer reference is detached for the copy), so the
    trained weights, ``.grad``, optimizer and RNG stream of training are untouched. Measured in
    ``on_validation_start`` on the weights the validation sees, out of inference mode; see
    :class:`~capgeo_callbacks.callbacks.base.GradientMeasureCallback` for the fixed
    batch, DDP and the no-observer-effect guarantees. Diverged chains (non-finite or exploding loss) are
    left out of ``llc``; divergence and a negative estimate (the weights are not at a local minimum, or
    ``lr`` is too large) each warn once, naming the first step. The loss trace of the last estimate is
    kept in :attr:`last_estimate` (and the callback state) for the run summary.

    The sampler's settings are :func:`~capgeo_callbacks.measures.llc.estimate_llc`'s, with its defaults:
    ``num_chains`` SGLD chains, ``num_draws`` draws per chain (no burn-in, one step per draw), the step size ``lr``
    (ε), ``localization`` (γ, the pull back to the current weights), ``nbeta`` (nβ; default b / log b for
    b = ``batch_size``) and the ``seed`` of the chains' noise.

    Args:
        loss_fn: ``loss_fn(output, batch) -> scalar`` mean loss; default answer-masked cross-entropy, for
            capgeo's dict batches only.
        every_n_evals: measure at every n-th validation.
        batch_size: examples per SGLD batch.
        num_batches: batches in the fixed data set (``num_batches * batch_size`` examples are cached).
        forward: ``forward(module, batch) -> output``; default ``module(batch["input_ids"])`` for a dict
            batch, ``module(batch[0])`` for a tuple.

    Raises:
        ValueError: on a bad argument, or at the first training batch if ``loss_fn`` is not given and the
            batch is not a dict with ``input_ids``, ``targets`` and ``answer_mask``.

    Logged keys:
        ``llc`` (mean over the chains that did not diverge), ``llc_std`` (over chains, with at least two),
        ``llc_fraction_below_init`` (fraction of draws whose loss is below :math:`L(w^*)`; far above 0.5
        means the weights are not at a local minimum).

    Example::

        monitor = LLCMonitor(every_n_evals=16, num_draws=200, lr=1e-4, localization=100.0)
        trainer = Trainer(callbacks=[monitor])
    """

    def __init__(
        self,
        loss_fn: LossFn | None = None,
        every_n_evals: int = 16,
        num_chains: int = SAMPLER["num_chains"],
        num_draws: int = SAMPLER["num_draws"],
        lr: float = SAMPLER["lr"],
        localization: float = SAMPLER["localization"],
        nbeta: float | None = SAMPLER["nbeta"],
        batch_size: int = 128,
        num_batches: int = 4,
        seed: int = SAMPLER["seed"],
        *,
        forward: ForwardFn | None = None,
    ) -> None:
        check_sampler(num_chains=num_chains, num_draws=num_draws, lr=lr, localization=localization, nbeta=nbeta,
                      seed=seed)
        check_positive_int("batch_size", batch_size)
        check_positive_int("num_batches", num_batches)
        super().__init__(loss_fn, forward, batch_size * num_batches, every_n_evals)
        self.num_chains, self.num_draws, self.seed = num_chains, num_draws, seed
        self.lr, self.localization = float(lr), float(localization)
        self.nbeta = None if nbeta is None else float(nbeta)
        self.batch_size, self.num_batches = batch_size, num_batches
        self.last_estimate: dict[str, Any] = {}

    @cached_property  # Lightning reads it at every hook call (its profiler's name): formatted once
    def state_key(self) -> str:  # type: ignore[override]
        return self._generate_state_key(
            num_chains=self.num_chains, num_draws=self.num_draws, lr=self.lr, localization=self.localization,
            nbeta=self.nbeta, batch_size=self.batch_size, num_batches=self.num_batches, seed=self.seed,
        )

    @property
    def tags(self) -> list[str]:
        """The logged tags."""
        return ["llc", "llc_std", "llc_fraction_below_init"]

    def batches(self, batch: Any) -> list[Any]:
        """The fixed examples cut into batches of ``batch_size`` (the last may be smaller)."""
        total = batch_size_of(batch)
        size = self.batch_size
        return [slice_batch(batch, start, start + size) for start in range(0, total, size)]

    @override
    def measure(self, pl_module: pl.LightningModule, batch: Any, step: int) -> dict[str, float]:
        with detached_from_trainer(pl_module):
            result = self.call_quietly(
                step, estimate_llc, pl_module, self.loss_fn, self.batches(batch),
                ignore=("chains diverged", "negative LLC estimate"),
                num_chains=self.num_chains, num_draws=self.num_draws, lr=self.lr,
                localization=self.localization, nbeta=self.nbeta, seed=self.seed, forward=self.forward,
            )
        diverged = int(result["diverged"].sum())
        llc, std, below = result["llc_mean"], result["llc_std"], result["fraction_below_init"]
        if diverged:
            self.warn_once("diverged", f"{diverged} of {self.num_chains} SGLD chains diverged at "
                           f"step {step} (non-finite or exploding loss) and are left out of llc; lower lr "
                           f"({self.lr:g}) or raise localization ({self.localization:g})")
        if math.isfinite(llc) and llc < 0:
            self.warn_once("negative", f"negative LLC estimate ({llc:.4g}) at step {step}: the "
                           f"weights are probably not at a local minimum (fraction of draws below the "
                           f"initial loss: {below:.2f}), or lr ({self.lr:g}) is too large")
        self.last_estimate = {
            "step": step,
            "init_loss": result["init_loss"],
            "nbeta": result["nbeta"],
            "llc_per_chain": result["llc_per_chain"].tolist(),
            "loss_trace": result["loss_trace"].tolist(),
        }
        values = {"llc": llc, "llc_std": std, "llc_fraction_below_init": below}
        return {tag: value for tag, value in values.items() if math.isfinite(value)}

    @override
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "last_estimate": dict(self.last_estimate)}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.last_estimate = dict(state_dict.get("last_estimate", {}))
