"""Learning onset: the evaluation from which a run does better than an answer that ignores the question.

Defined once, causally (it uses only the evaluations so far), so that the same definition is the label the
scorer measures leads against and the loss-only warning rule that runs live. Where the run knows its chance
level (:class:`~capgeo_callbacks.detection.Chance`: the answer marginal's log-prob and its spread), onset is
the first of ``patience`` evaluations at which the answer log-prob stands above the marginal's by more than
``units`` standard errors (at least ``min_gain`` nats): the model has started to use the input. Without a
chance level, the reference is the log-prob's own plateau after the warm-up (the median over the warm-up's
second length), the margin ``units`` times that plateau's evaluation-to-evaluation noise.

Why not a change-point library (``ruptures``): its segmentations are fitted to the whole series, so the onset
it finds moves as later evaluations arrive; a warning must be decided on the evaluations so far.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

from capgeo_callbacks.detection.events import noise_scale
from capgeo_callbacks.detection.labels import Chance

__all__ = ["learning_onset"]

MIN_GAIN = 0.05  # nats: a smaller rise is no learning


def learning_onset(steps: Sequence[int], logprob: Sequence[float], chance: Chance | None = None,
                   warmup_steps: int = 0, units: float = 3.0, patience: int = 2,
                   min_gain: float = MIN_GAIN) -> int | None:
    """The learning-onset step of a run's answer log-prob so far (module docstring), or None."""
    points = [(int(s), float(v)) for s, v in zip(steps, logprob, strict=True) if math.isfinite(v)]
    if chance is not None:
        level = chance.logprob + max(units * chance.logprob_sd / math.sqrt(max(1, chance.tokens)), min_gain)
        candidates = points
    else:
        guard = max(1, warmup_steps)
        window = [v for s, v in points if guard <= s <= 2 * guard] or [v for s, v in points if s >= guard][:3]
        if len(window) < 2:
            return None
        level = statistics.median(window) + max(units * noise_scale(np.array(window)), min_gain)
        candidates = [(s, v) for s, v in points if s > 2 * guard]
    run = 0
    for i, (_, value) in enumerate(candidates):
        run = run + 1 if value >= level else 0
        if run == patience:
            return candidates[i - patience + 1][0]
    return None
