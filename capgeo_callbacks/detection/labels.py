"""What a run learned, on its accuracy series: the labels every warning and forecast is scored against.

Definitions (docs/design.md, "Labels"):

- **holds x at step s**: ``patience`` consecutive evaluations from ``s`` on have accuracy >= x.
- **acquisition step**: the first step at which the run holds ``threshold`` (0.5).
- **acquired fully**: acquired, holds ``full_threshold`` (0.9) too, and after the acquisition step no
  ``patience`` consecutive evaluations average below ``threshold`` minus the Wilson half-width of the
  validation set (about 0.043 at 512 questions): the climb may wobble, it may not fall back.
- **late**: the acquisition step is at least ``late_warmups`` times the warm-up and at least ``late_fraction``
  of the budget.
- **at chance**: every evaluation's accuracy stays at or below the upper end of the Wilson interval of the
  chance rate (the exact match of the best input-independent answer), and, where given, token accuracy and
  answer log-prob stay at the level of the answer's marginal distribution (no input dependence learned).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from capgeo_callbacks.detection.series import as_floats, check_steps
from capgeo_callbacks.detection.settings import DEFAULT_SETTINGS, DetectionSettings
from capgeo_callbacks.detection.stats import Z95, wilson, wilson_half_width

__all__ = ["HOLD_LEVELS", "Chance", "RunLabels", "at_chance", "detect_hold", "label_run"]

HOLD_LEVELS = (0.25, 0.5, 0.6, 0.75, 0.9)
LATE_WARMUPS = 4  # acquisition at >= 4 warm-ups ...
LATE_FRACTION = 0.25  # ... and >= 25% of the budget is "late"
OUTCOMES = ("acquired-fully", "acquired", "fell-back", "partial", "chance", "unknown")


def detect_hold(steps: Sequence[int], acc: Sequence[float], level: float, patience: int) -> int | None:
    """The first step from which ``acc`` >= ``level`` for ``patience`` consecutive evaluations, or None.

    NaN counts as below. A run that ends before ``patience`` evaluations confirm a hold has not held.
    """
    step_list = check_steps(steps)
    values = as_floats("acc", acc, len(step_list))
    run = 0
    for i, value in enumerate(values):
        run = run + 1 if value >= level else 0
        if run == patience:
            return step_list[i - patience + 1]
    return None


def fell_back(steps: Sequence[int], acc: Sequence[float], after: int, floor: float, patience: int) -> int | None:
    """The first step after ``after`` that starts ``patience`` consecutive evaluations averaging below
    ``floor``, or None."""
    step_list = check_steps(steps)
    values = as_floats("acc", acc, len(step_list))
    for i in range(len(values) - patience + 1):
        if step_list[i] > after:
            window = values[i:i + patience]
            mean = sum(window) / patience
            if not math.isnan(mean) and mean < floor:
                return step_list[i]
    return None


@dataclass(frozen=True)
class Chance:
    """What a model that ignores the question scores on the validation set.

    Attributes:
        exact: exact match of the best input-independent answer (the most frequent whole answer).
        token_acc: per-token accuracy of the per-position most frequent token.
        logprob: mean log-probability of the answer tokens under the per-position marginal distribution.
        logprob_sd: standard deviation of that per-token log-probability (its noise scale).
        questions: validation questions.
        tokens: validation answer tokens.
    """

    exact: float
    token_acc: float
    logprob: float
    logprob_sd: float
    questions: int
    tokens: int

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Chance:
        return cls(**{name: values[name] for name in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def at_chance(acc: Sequence[float], chance: Chance, token_acc: Sequence[float] = (),
              logprob: Sequence[float] = ()) -> bool:
    """Whether a run stayed at chance at every evaluation (module docstring): accuracy within the Wilson
    interval of the chance rate, token accuracy within that of the marginal's, log-prob no more than
    ``Z95`` standard errors above the marginal's."""
    exact_top = wilson(round(chance.exact * chance.questions), chance.questions)[1]  # type: ignore[index]
    token_top = wilson(round(chance.token_acc * chance.tokens), chance.tokens)[1]  # type: ignore[index]
    logprob_top = chance.logprob + Z95 * chance.logprob_sd / math.sqrt(max(1, chance.tokens))
    finite = lambda values: [v for v in values if not math.isnan(v)]  # noqa: E731
    return (all(v <= exact_top for v in finite(acc)) and all(v <= token_top for v in finite(token_acc))
            and all(v <= logprob_top for v in finite(logprob)))


@dataclass(frozen=True)
class RunLabels:
    """A run's labels (module docstring).

    Attributes:
        acquisition_step: the first step holding ``threshold``, or None.
        holds: per level of :data:`HOLD_LEVELS` (as a string, "0.5"), the first step holding it, or None.
        full_step: the first step holding ``full_threshold``, or None.
        fallback_step: after acquisition, the first step of a fall-back below the floor, or None.
        acquired_fully: acquired, full_step set and no fall-back.
        late: whether the acquisition is late (None: not acquired, or warm-up and budget unknown).
        max_acc: the highest accuracy of any evaluation.
        at_chance: whether it stayed at chance (None: chance unknown).
        outcome: one of ``acquired-fully``, ``acquired`` (held 0.5, not 0.9), ``fell-back``, ``partial`` (above
            chance, never acquired), ``chance``, ``unknown`` (never acquired, chance unknown).
    """

    acquisition_step: int | None
    holds: dict[str, int | None]
    full_step: int | None
    fallback_step: int | None
    acquired_fully: bool
    late: bool | None
    max_acc: float | None
    at_chance: bool | None
    outcome: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def label_run(
    steps: Sequence[int],
    acc: Sequence[float],
    settings: DetectionSettings = DEFAULT_SETTINGS,
    *,
    warmup_steps: int | None = None,
    max_steps: int | None = None,
    chance: Chance | None = None,
    token_acc: Sequence[float] = (),
    logprob: Sequence[float] = (),
) -> RunLabels:
    """Label one run from its accuracy at every evaluation (module docstring)."""
    patience = settings.patience
    acquisition = detect_hold(steps, acc, settings.threshold, patience)
    full_threshold = max(settings.threshold, settings.full_threshold)
    levels = sorted({*HOLD_LEVELS, settings.threshold, full_threshold})
    holds = {f"{level:g}": detect_hold(steps, acc, level, patience) for level in levels}
    full = holds[f"{full_threshold:g}"]
    floor = settings.threshold - wilson_half_width(settings.threshold, settings.validation_size)
    fallback = None if acquisition is None else fell_back(steps, acc, acquisition, floor, patience)
    fully = acquisition is not None and full is not None and fallback is None
    late = None
    if acquisition is not None and warmup_steps is not None and max_steps is not None:
        late = acquisition >= LATE_WARMUPS * warmup_steps and acquisition >= LATE_FRACTION * max_steps
    finite = [v for v in acc if not math.isnan(v)]
    chance_held = None if chance is None else at_chance(acc, chance, token_acc, logprob)
    if fully:
        outcome = "acquired-fully"
    elif acquisition is not None:
        outcome = "fell-back" if fallback is not None else "acquired"
    elif chance_held is None:
        outcome = "unknown"
    else:
        outcome = "chance" if chance_held else "partial"
    return RunLabels(acquisition, holds, full, fallback, fully, late, max(finite) if finite else None, chance_held,
                     outcome)
