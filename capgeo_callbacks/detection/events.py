"""Events on plain series: acquisition, log-prob emergence, RankMe collapse and recovery, verdicts.

Steps are the training steps of the evaluations, strictly increasing; "within n evaluations" counts
positions in that sequence, not steps. Definitions: docs/design.md, "Detection".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from capgeo_callbacks.detection.labels import detect_hold
from capgeo_callbacks.detection.series import as_floats, check_steps, moving_average
from capgeo_callbacks.detection.settings import DEFAULT_SETTINGS, DetectionSettings, check_setting

VerdictName = Literal["precursor", "simultaneous", "no-collapse", "not-acquired"]


@dataclass(frozen=True)
class Emergence:
    """The first evaluation at which the log-prob of the correct answer reached the threshold.

    Attributes:
        step: training step of that evaluation.
        acc_at_step: accuracy at that evaluation (None if no accuracy was given, NaN if it was missing).
        logprob: the log-prob there.
    """

    step: int
    acc_at_step: float | None
    logprob: float


@dataclass(frozen=True)
class Collapse:
    """A RankMe collapse: the trough of the smoothed series after a substantial drop from its peak.

    Attributes:
        step: step of the trough (the collapse step).
        floor: the minimum raw (unsmoothed) RankMe from the peak onward, over the series considered.
        peak: the smoothed RankMe at the peak, the highest value at or before the trough.
        peak_step: step of the peak.
        drop_fraction: (peak - trough) / peak, on the smoothed series.
        recovery_step: step at which recovery was confirmed, or None (not recovered, or not yet).
        trough: the smoothed RankMe at the trough.
        noise: the series' evaluation-to-evaluation noise (a robust standard deviation of its successive
            differences over the points considered, divided by sqrt 2), 0 with fewer than 3 points.
    """

    step: int
    floor: float
    peak: float
    peak_step: int
    drop_fraction: float
    recovery_step: int | None
    trough: float = math.nan
    noise: float = 0.0

    @property
    def drop_in_noise_units(self) -> float | None:
        """(peak - trough) / noise: how far the drop stands out of the series' own noise."""
        return None if self.noise <= 0 else (self.peak - self.trough) / self.noise


@dataclass(frozen=True)
class Verdict:
    """Whether a collapse preceded acquisition.

    Attributes:
        verdict: "precursor", "simultaneous", "no-collapse" or "not-acquired".
        gap: acquisition step minus collapse step ("precursor" and "simultaneous"), else None.
        layer: for a run verdict, the layer it comes from (None for a single-layer verdict or none).
    """

    verdict: VerdictName
    gap: int | None
    layer: str | None = None


@dataclass(frozen=True)
class LayerResult:
    """Everything :func:`layer_verdict` finds for one layer.

    Attributes:
        acquisition_step: the run's acquisition step (None if not acquired).
        collapse: the collapse found up to ``window`` evaluations after acquisition (whole series if not
            acquired); the one the verdict is about.
        verdict: the layer's verdict and gap.
        floor: the collapse floor of the whole series (a later, deeper collapse counts), None if it never
            collapsed.
        min_rankme: the minimum raw RankMe of the whole series, None if the series has no value.
    """

    acquisition_step: int | None
    collapse: Collapse | None
    verdict: Verdict
    floor: float | None
    min_rankme: float | None


def detect_acquisition(
    steps: Sequence[int],
    acc: Sequence[float],
    threshold: float = DEFAULT_SETTINGS.threshold,
    patience: int = DEFAULT_SETTINGS.patience,
) -> int | None:
    """The acquisition step: the first evaluation from which acc >= threshold for ``patience`` evaluations.

    A single spike above the threshold does not count; NaN counts as below. If the series ends before
    ``patience`` evaluations have confirmed it, the capability is not (yet) acquired.

    Raises:
        ValueError: on mismatched lengths, non-increasing steps or a bad threshold / patience.
    """
    check_setting("threshold", threshold)
    check_setting("patience", patience)
    return detect_hold(steps, acc, threshold, patience)


def detect_logprob_emergence(
    steps: Sequence[int],
    logprob: Sequence[float],
    acc: Sequence[float] | None = None,
    threshold: float = DEFAULT_SETTINGS.logprob_threshold,
) -> Emergence | None:
    """The first evaluation at which the answer's mean log-prob is >= ``threshold`` (default log 0.5).

    Reported with the accuracy at that step: log-prob moves smoothly and crosses earlier than accuracy,
    which is how it can make acquisition look gradual (and why it is reported, not used for verdicts).

    Raises:
        ValueError: on mismatched lengths, non-increasing steps or a threshold that is not a log-prob.
    """
    check_setting("logprob_threshold", threshold)
    step_list = check_steps(steps)
    values = as_floats("logprob", logprob, len(step_list))
    accs = None if acc is None else as_floats("acc", acc, len(step_list))
    for i, value in enumerate(values):
        if value >= threshold:
            return Emergence(step=step_list[i], acc_at_step=None if accs is None else accs[i], logprob=value)
    return None


def detect_collapse(
    steps: Sequence[int],
    rankme: Sequence[float],
    settings: DetectionSettings = DEFAULT_SETTINGS,
    *,
    until_step: int | None = None,
) -> Collapse | None:
    """A layer's RankMe collapse and its recovery, on a plain series.

    1. Keep the finite points with ``guard_steps`` <= step <= ``until_step`` (NaN marks a skipped measurement).
    2. Smooth: centred moving average of ``settings.smoothing`` points, shrinking at the edges.
    3. The trough is the lowest smoothed point (first occurrence) among those whose drop from the highest
       smoothed value at or before them (the peak) is at least ``min_drop`` of that peak. Restricting to
       qualifying points catches RankMe that starts low, expands, then collapses to a value still above
       the initial one. With ``noise_units`` > 0 the drop must also be that many noise units.
    4. floor = the minimum raw value from the peak onward.
    5. Recovery: the first time after the trough that the smoothed value has been at or above
       trough + max(recovery_fraction * (peak - trough), min_recovery, noise_units * noise) for
       ``recovery_evals`` consecutive evaluations; the step reported is the last of those, when recovery is
       confirmed.

    O(n) with numpy. Smoothed values at the end of a prefix use a shrunk window and may change as points
    arrive.

    Raises:
        ValueError: on mismatched lengths or non-increasing steps.
    """
    step_list = check_steps(steps)
    values = np.asarray(as_floats("rankme", rankme, len(step_list)), dtype=np.float64)
    keep = np.isfinite(values)
    if settings.guard_steps:
        keep &= np.asarray(step_list, dtype=np.int64) >= settings.guard_steps
    if until_step is not None:
        keep &= np.asarray(step_list, dtype=np.int64) <= int(until_step)
    index = np.flatnonzero(keep)
    if index.size == 0:
        return None
    raw = values[index]
    smooth = moving_average(raw, settings.smoothing)
    running_peak = np.maximum.accumulate(smooth)
    drop = running_peak - smooth
    noise = noise_scale(raw)
    qualifies = (drop >= settings.min_drop * running_peak) & (drop > 0) & (running_peak > 0)
    if settings.noise_units:
        qualifies &= drop >= settings.noise_units * noise
    if not qualifies.any():
        return None
    candidates = np.flatnonzero(qualifies)
    trough = int(candidates[np.argmin(smooth[candidates])])  # first occurrence of the lowest
    peak_value = float(running_peak[trough])
    peak = int(np.argmax(smooth[: trough + 1]))  # first occurrence of the peak
    trough_value = float(smooth[trough])
    rise = max(settings.recovery_fraction * (peak_value - trough_value), settings.min_recovery,
               settings.noise_units * noise)
    level = trough_value + rise
    recovery = None
    run = 0
    for j in range(trough + 1, smooth.size):
        run = run + 1 if smooth[j] >= level else 0
        if run == settings.recovery_evals:
            recovery = step_list[int(index[j])]
            break
    return Collapse(
        step=step_list[int(index[trough])],
        floor=float(raw[peak:].min()),
        peak=peak_value,
        peak_step=step_list[int(index[peak])],
        drop_fraction=(peak_value - trough_value) / peak_value,
        recovery_step=recovery,
        trough=trough_value,
        noise=noise,
    )


def noise_scale(values: np.ndarray) -> float:
    """A robust standard deviation of a series' noise: 1.4826 x the median absolute successive difference,
    over sqrt 2 (a difference of two independent draws has twice the variance); 0 with fewer than 3 points."""
    if values.size < 3:
        return 0.0
    return float(1.4826 * np.median(np.abs(np.diff(values))) / math.sqrt(2.0))


def precursor_verdict(
    steps: Sequence[int],
    acquisition_step: int | None,
    collapse: Collapse | None,
    settings: DetectionSettings = DEFAULT_SETTINGS,
) -> Verdict:
    """The verdict for one layer: did its collapse-and-recovery come before acquisition?

    In order: not acquired -> "not-acquired"; no collapse -> "no-collapse"; trough within ``window``
    evaluations of the acquisition evaluation, either side -> "simultaneous"; trough later than that ->
    "no-collapse" (a collapse after the capability is a consequence of it, not a precursor); trough
    earlier and recovery confirmed at or before the acquisition step -> "precursor"; trough earlier but
    recovery not confirmed by acquisition -> "simultaneous". The gap is acquisition step minus collapse
    step. Pass a collapse found with ``until_step`` = the step ``window`` evaluations after acquisition
    (as :func:`layer_verdict` does), so that a deeper collapse after acquisition does not mask an earlier one.

    Raises:
        ValueError: if a step compared is not in ``steps``.
    """
    if acquisition_step is None:
        return Verdict("not-acquired", None)
    if collapse is None:
        return Verdict("no-collapse", None)
    step_list = check_steps(steps)
    position = {step: i for i, step in enumerate(step_list)}
    for name, step in (("acquisition_step", acquisition_step), ("collapse step", collapse.step)):
        if step not in position:
            raise ValueError(f"{name} {step} is not one of the evaluation steps")
    gap = int(acquisition_step) - collapse.step
    offset = position[collapse.step] - position[acquisition_step]
    if abs(offset) <= settings.window:
        return Verdict("simultaneous", gap)
    if offset > 0:
        return Verdict("no-collapse", None)
    if collapse.recovery_step is not None and collapse.recovery_step <= acquisition_step:
        return Verdict("precursor", gap)
    return Verdict("simultaneous", gap)


def search_end(steps: Sequence[int], acquisition_step: int | None, window: int) -> int | None:
    """The last step a pre-acquisition search may look at: ``window`` evaluations after acquisition
    (None, the whole series, when not acquired)."""
    if acquisition_step is None:
        return None
    position = list(steps).index(acquisition_step)
    return int(steps[min(position + window, len(steps) - 1)])


def layer_verdict(
    steps: Sequence[int],
    rankme: Sequence[float],
    acc: Sequence[float],
    settings: DetectionSettings = DEFAULT_SETTINGS,
) -> LayerResult:
    """Acquisition, collapse and verdict for one layer.

    The collapse for the verdict is searched up to the step ``window`` evaluations after acquisition (the
    whole series when not acquired); the whole-series collapse gives the floor.
    """
    step_list = check_steps(steps)
    acquisition = detect_acquisition(step_list, acc, settings.threshold, settings.patience)
    until = search_end(step_list, acquisition, settings.window)
    collapse = detect_collapse(step_list, rankme, settings, until_step=until)
    whole = collapse if until is None else detect_collapse(step_list, rankme, settings)
    finite = [v for v in as_floats("rankme", rankme, len(step_list)) if math.isfinite(v)]
    return LayerResult(
        acquisition_step=acquisition,
        collapse=collapse,
        verdict=precursor_verdict(step_list, acquisition, collapse, settings),
        floor=None if whole is None else whole.floor,
        min_rankme=min(finite) if finite else None,
    )


def run_verdict(layer_results: Mapping[str, LayerResult], acquired: bool | None = None) -> Verdict:
    """The run's verdict from its layers': "precursor" if any layer is, else "simultaneous" if any is.

    The gap is the largest among the layers with that verdict (the earliest collapse), and ``layer`` says
    which; otherwise "no-collapse" if the run acquired, else "not-acquired". With no layer at all,
    ``acquired`` decides between the last two.
    """
    for name in ("precursor", "simultaneous"):
        matches = [(r.verdict.gap, layer) for layer, r in layer_results.items() if r.verdict.verdict == name]
        if matches:
            gap, layer = max(matches, key=lambda m: m[0] if m[0] is not None else -math.inf)
            return Verdict(name, gap, layer)  # type: ignore[arg-type]
    if acquired is None:
        acquired = any(r.acquisition_step is not None for r in layer_results.values())
    return Verdict("no-collapse" if acquired else "not-acquired", None)
