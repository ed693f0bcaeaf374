"""The warm-up read from a recorded learning rate, and the rules reading it where a run declares none."""

from __future__ import annotations

import math

from capgeo_callbacks.detection.warmup import warmup_from_lr
from capgeo_callbacks.rules import RunView


def linear_warmup_then_cosine(step: int, warmup: int = 100, total: int = 1000, peak: float = 1e-3) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))


def test_the_step_where_the_rate_first_reaches_its_maximum() -> None:
    steps = [0, 10, 50, 99, 100, 150, 400, 1000]
    assert warmup_from_lr(steps, [linear_warmup_then_cosine(s) for s in steps]) == 99  # (99 + 1) / 100: the peak
    assert warmup_from_lr([0, 10, 20], [3e-4, 3e-4, 3e-4]) == 0  # a constant rate: no warm-up
    assert warmup_from_lr([0, 10, 20, 30], [1e-4, 2e-4, 3e-4, 3e-4]) == 20  # a plateau after it: its first step
    assert warmup_from_lr([0, 10, 20], [1e-4, 2e-4, 3e-4]) == 20  # still rising: at least this long so far
    assert warmup_from_lr([0, 10, 20], [math.nan, 2e-4, 2e-4 * (1 - 1e-9)]) == 10  # within rel_tol of the peak
    assert warmup_from_lr([0, 10], [math.nan, math.nan]) is None
    assert warmup_from_lr([], []) is None


def test_a_rule_reads_it_where_the_run_declares_no_warm_up() -> None:
    steps = [0, 20, 40, 60, 80]
    lr = [1e-4, 5e-4, 1e-3, 1e-3, 9e-4]
    acc = [[s, 0.0] for s in steps]
    view = RunView.from_points(acc, {"lr": [[s, v] for s, v in zip(steps, lr, strict=True)]}, {})
    assert view.warmup_steps == 40
    assert view.prefix(2).warmup_steps == 20  # on a prefix, what the run showed so far: live and replayed alike
    declared = RunView.from_points(acc, {"lr": [[s, v] for s, v in zip(steps, lr, strict=True)]}, {"warmup_steps": 7})
    assert declared.warmup_steps == 7  # declared wins
    assert RunView.from_points(acc, {}, {}).warmup_steps is None  # nothing recorded, nothing declared
