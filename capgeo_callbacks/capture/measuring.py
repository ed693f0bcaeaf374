"""Measuring a model without changing it.

:func:`measuring` is where every measurement runs (the Lightning monitors, the Hugging Face callback, offline
analysis): each submodule in eval mode and restored afterwards, the global RNG forked so nothing drawn there
reaches training's stream (iterating a loader draws a seed), and gradients only where the measure needs them.
:class:`Measured` is what one model's measurement on a probe set gave.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from capgeo_callbacks.keys import ILDR, PROBE_ACC, RANKME
from capgeo_callbacks.measures.hessian import math_sdpa

__all__ = ["Measured", "measuring"]


@dataclass
class Measured:
    """One model's measurements on a probe set (a revision offline, an evaluation of the Hugging Face callback).

    Attributes:
        rankme: RankMe per layer label (NaN where it could not be measured).
        probe_acc: held-out linear probe accuracy per layer label (only layers that were probed).
        scalars: the module's validation scalars (``val/acc``, ``val/token_acc``, ``val/logprob``...), by tag.
        rows: rows each tag was measured on (``rankme/<label>``, ``probe_acc/<label>``).
        parameters: the model's parameter count.
        ildr: ILDR per layer label (only layers whose rows had targets).
        left_out: measures left out for lack of their inputs, by tag prefix, with why (the summary's
            ``measures_left_out``).
    """

    rankme: dict[str, float]
    probe_acc: dict[str, float] = field(default_factory=dict)
    scalars: dict[str, float] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    parameters: int = 0
    ildr: dict[str, float] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)

    def add(self, values: Mapping[str, float]) -> None:
        """File a unit's or a monitor's values by tag (``rankme/<label>``, ``ildr/<label>``, ``probe_acc/<label>``)
        under their measure, by layer label (other tags are not this record's)."""
        measures = {RANKME: self.rankme, ILDR: self.ildr, PROBE_ACC: self.probe_acc}
        for tag, value in values.items():
            prefix, _, label = tag.partition("/")
            if f"{prefix}/" in measures:
                measures[f"{prefix}/"][label] = value


@contextlib.contextmanager
def measuring(module: nn.Module, grad: bool = False) -> Iterator[None]:
    """Eval mode and the RNG forked for the ``with`` block, each submodule's mode restored afterwards.

    Without ``grad``: under ``torch.no_grad``. With ``grad`` (gradient-based measures): out of inference mode,
    grad enabled, attention on the math path (double backward, vmap batching rules).
    """
    modes = [(m, m.training) for m in module.modules()]
    first = next(module.parameters(), None)
    device = first.device if first is not None else torch.device("cpu")
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.random.fork_rng(devices=cuda))
            if grad:
                stack.enter_context(torch.inference_mode(False))
                stack.enter_context(torch.enable_grad())
                stack.enter_context(math_sdpa())
            else:
                stack.enter_context(torch.no_grad())
            module.eval()
            yield
    finally:
        for m, training in modes:
            m.training = training
