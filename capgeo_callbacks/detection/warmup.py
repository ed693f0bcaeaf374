"""The learning-rate warm-up of a run, read from its recorded learning rate where the run does not declare it."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["warmup_from_lr"]


def warmup_from_lr(steps: Sequence[int], lr: Sequence[float], rel_tol: float = 1e-6) -> int | None:
    """The step where the learning rate first reaches its maximum (within ``rel_tol``): the end of its warm-up.

    Read at the evaluation steps, so it is the first evaluation at or after the warm-up's end; a rate still rising at
    the last evaluation gives that step (the warm-up has lasted at least so long); a constant rate, the first step.
    On a prefix of the run it is what the run showed so far, so a rule replayed offline reads what it read live.

    Args:
        steps: the evaluation steps.
        lr: the learning rate at each (NaN where not recorded).

    Returns:
        The step, or ``None`` where no finite learning rate is recorded.
    """
    finite = [(int(step), float(value)) for step, value in zip(steps, lr, strict=False) if math.isfinite(value)]
    if not finite:
        return None
    peak = max(value for _, value in finite)
    return next(step for step, value in finite if value >= peak * (1 - rel_tol))
