"""Evaluation schedules: step 0, dense early, the same steps for any stop."""

from __future__ import annotations

import pytest

from capgeo_callbacks.run.schedule import EARLY_SHARE, EARLY_SPAN, evaluation_steps, validation_passes


@pytest.mark.parametrize("max_steps", [100, 1500, 3000, 6000, 15000])
def test_geometric_schedule(max_steps: int) -> None:
    steps = evaluation_steps(max_steps)
    assert steps[0] == 0 and steps[-1] == max_steps and steps == sorted(set(steps))
    # about 256 (rounding merges a few early points; a short budget has fewer distinct steps)
    assert min(0.9 * 256, max_steps + 1) <= len(steps) <= 256
    early = [s for s in steps if 0 < s <= EARLY_SPAN * max_steps]
    # a quarter of the points in the first tenth (fewer distinct ones when the first tenth has fewer steps)
    assert len(early) >= min(EARLY_SHARE * 256 * 0.6, EARLY_SPAN * max_steps * 0.9)
    assert steps[1:4] == [1, 2, 3]  # the first updates are each seen
    late = [s for s in steps if s > EARLY_SPAN * max_steps]
    gaps = {b - a for a, b in zip(late, late[1:], strict=False)}
    assert max(gaps) - min(gaps) <= 1  # evenly spaced after the first tenth


def test_linear_schedule_and_errors() -> None:
    assert evaluation_steps(100, 11, "linear") == list(range(0, 101, 10))
    assert evaluation_steps(3000, 256, "linear")[:3] == [0, 12, 24]
    with pytest.raises(ValueError, match="valid: geometric, linear"):
        evaluation_steps(100, 10, "log")
    with pytest.raises(ValueError, match="max_steps must be a positive integer"):
        evaluation_steps(0)


def test_the_passes_the_schedule_adds_are_counted_from_it() -> None:
    assert validation_passes(3000) == (len(evaluation_steps(3000)), 0)  # an endless stream: Lightning makes none
    assert validation_passes(3000, steps_per_epoch=100) == (256, 30)  # one at the end of each whole epoch
    assert validation_passes(20, 1) == (3, 0)  # steps 0, 1 and the end
    with pytest.raises(ValueError, match="steps_per_epoch"):
        validation_passes(100, steps_per_epoch=0)
