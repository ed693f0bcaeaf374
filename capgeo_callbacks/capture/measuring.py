"""Measuring a model without changing it, and turning captured rows into values.

:func:`measuring` is where every measurement runs (the Lightning monitors, the Hugging Face callback, offline
analysis): each submodule in eval mode and restored afterwards, the global RNG forked so nothing drawn there
reaches training's stream (iterating a loader draws a seed), and gradients only where the measure needs them.
:func:`usable_rows`, :func:`rankme_of_rows` and :func:`probe_of_rows` are the row-count checks and the two
hidden-state measures every caller applies the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from capgeo_callbacks.measures.hessian import math_sdpa
from capgeo_callbacks.measures.probes import held_out_probe_accuracy
from capgeo_callbacks.measures.rankme import rankme

__all__ = ["Measured", "measuring", "probe_of_rows", "rankme_of_rows", "usable_rows"]

WarnFn = Callable[[str, str], Any]


@dataclass
class Measured:
    """One model's measurements on a probe set (a revision offline, an evaluation of the Hugging Face callback).

    Attributes:
        rankme: RankMe per layer label (NaN where it could not be measured).
        probe_acc: held-out linear probe accuracy per layer label (only layers that were probed).
        scalars: the module's validation scalars (``val/acc``, ``val/token_acc``, ``val/logprob``...), by tag.
        rows: rows each tag was measured on (``rankme/<label>``, ``probe_acc/<label>``).
        parameters: the model's parameter count.
    """

    rankme: dict[str, float]
    probe_acc: dict[str, float] = field(default_factory=dict)
    scalars: dict[str, float] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    parameters: int = 0


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


def usable_rows(layer: str, count: int, minimum: int, num_rows: int, warn: WarnFn) -> bool:
    """Whether ``count`` captured rows of ``layer`` can be measured (at least ``minimum``); fewer than
    ``num_rows`` are measured with a warning, since RankMe is only comparable at equal N."""
    if count < minimum:
        warn(f"empty:{layer}", f"{count} row{'' if count == 1 else 's'} captured for {layer!r}, fewer than "
             f"{minimum}; skipped")
        return False
    if count < num_rows:
        warn(f"few:{layer}", f"{layer!r} gave {count} rows, fewer than num_rows={num_rows}; measured on {count} rows")
    return True


def rankme_of_rows(layer: str, rows: Tensor, eps: float, step: int | None, warn: WarnFn) -> float | None:
    """RankMe of the rows, or None (warned) when the hidden states are not finite."""
    try:
        return rankme(rows, eps=eps)
    except ValueError as err:
        warn(f"value:{layer}", f"{layer!r}{_at(step)}: {err}; skipped")
        return None


def probe_of_rows(layer: str, rows: Tensor, labels: Tensor, ridge: float, step: int | None,
                  warn: WarnFn) -> float | None:
    """Held-out linear probe accuracy of the rows (fit on the first half, scored on the second), or None (warned)
    on non-finite hidden states or a singular system."""
    try:
        return held_out_probe_accuracy(rows, labels, ridge=ridge)
    except (ValueError, RuntimeError) as err:
        warn(f"value:{layer}", f"{layer!r}{_at(step)}: {err}; skipped")
        return None


def _at(step: int | None) -> str:
    return "" if step is None else f" at step {step}"
