"""Detection on plain series
=========================

Acquisition, log-prob emergence, RankMe collapse and recovery, the precursor verdict and the layer
order (spec §7), all on plain (step, value) sequences so the same code runs live (through
`PrecursorTracker`, which `PrecursorDetector` feeds at every validation) and offline on a finished
run's series. No torch and no Lightning here: plain Python and numpy.

Steps are the training steps of the evaluations, strictly increasing; "within n evaluations" counts
positions in that sequence, not steps.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

__all__ = [
    "Alert",
    "Collapse",
    "Emergence",
    "LayerResult",
    "PrecursorTracker",
    "Verdict",
    "detect_acquisition",
    "detect_collapse",
    "detect_logprob_emergence",
    "TRANSITION_KINDS",
    "Transition",
    "layer_order",
    "layer_verdict",
    "measure_transition",
    "precursor_verdict",
    "run_verdict",
    "spearman",
]

VerdictName = Literal["precursor", "simultaneous", "no-collapse", "not-acquired"]
_COLLAPSE_KWARGS = ("min_drop", "recovery_fraction", "recovery_evals", "smoothing")


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
    """

    step: int
    floor: float
    peak: float
    peak_step: int
    drop_fraction: float
    recovery_step: int | None


@dataclass(frozen=True)
class Verdict:
    """Whether a collapse preceded acquisition (spec §7).

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
    """Everything `layer_verdict` finds for one layer.

    Attributes:
        acquisition_step: the run's acquisition step (None if not acquired).
        collapse: the collapse found up to `window` evaluations after acquisition (whole series if not
            acquired); the one the verdict is about.
        verdict: the layer's verdict and gap.
        whole_series_collapse: the collapse found on the whole series (a later, deeper one counts).
        floor: the collapse floor of the whole series (spec §7), None if it never collapsed.
        min_rankme: the minimum raw RankMe of the whole series, None if the series has no value.
    """

    acquisition_step: int | None
    collapse: Collapse | None
    verdict: Verdict
    whole_series_collapse: Collapse | None
    floor: float | None
    min_rankme: float | None


@dataclass(frozen=True)
class Alert:
    """A precursor alert: a layer's RankMe collapsed and recovered while the run had not acquired.

    Attributes:
        kind: "layer" (once per layer) or "run" (once per run, with the first layer that raised).
        layer: the layer whose collapse raised it.
        step: the step of the evaluation at which it was raised.
        collapse_step: the layer's collapse (trough) step.
        floor: the layer's collapse floor so far.
        recovery_step: the step at which recovery was confirmed.
    """

    kind: Literal["layer", "run"]
    layer: str
    step: int
    collapse_step: int
    floor: float
    recovery_step: int


def detect_acquisition(
    steps: Sequence[int], acc: Sequence[float], threshold: float = 0.5, patience: int = 3
) -> int | None:
    """The acquisition step: the first evaluation from which acc >= threshold for `patience` evaluations.

    A single spike above the threshold does not count; NaN counts as below. If the series ends before
    `patience` evaluations have confirmed it, the capability is not (yet) acquired.

    Args:
        steps: the evaluation steps, strictly increasing.
        acc: the accuracy at each step.
        threshold: accuracy threshold, in (0, 1].
        patience: consecutive evaluations at or above the threshold, >= 1.

    Returns:
        The step of the first of those evaluations, or None.

    Raises:
        ValueError: on mismatched lengths, non-increasing steps or bad threshold / patience.
    """
    _check_threshold(threshold)
    _check_int("patience", patience, 1)
    step_list = _check_steps(steps)
    values = _as_floats("acc", acc, len(step_list))
    run = 0
    for i, value in enumerate(values):
        run = run + 1 if value >= threshold else 0
        if run == patience:
            return step_list[i - patience + 1]
    return None


def detect_logprob_emergence(
    steps: Sequence[int],
    logprob: Sequence[float],
    acc: Sequence[float] | None = None,
    threshold: float = math.log(0.5),
) -> Emergence | None:
    """The first evaluation at which the answer's log-prob is >= threshold (default log 0.5).

    Reported with the accuracy at that step: log-prob moves smoothly and crosses earlier than accuracy,
    which is how it can make acquisition look gradual (and why it is reported, not used for verdicts).

    Args:
        steps: the evaluation steps, strictly increasing.
        logprob: mean log-prob of the correct answer at each step.
        acc: accuracy at each step, optional.
        threshold: the log-prob threshold (finite).

    Returns:
        An `Emergence`, or None if the log-prob never reaches the threshold.

    Raises:
        ValueError: on mismatched lengths, non-increasing steps or a non-finite threshold.
    """
    if not _is_real(threshold) or not math.isfinite(threshold):
        raise ValueError(f"threshold must be a finite log-prob (default log(0.5)), got {threshold!r}")
    step_list = _check_steps(steps)
    values = _as_floats("logprob", logprob, len(step_list))
    accs = None if acc is None else _as_floats("acc", acc, len(step_list))
    for i, value in enumerate(values):
        if value >= threshold:
            return Emergence(step=step_list[i], acc_at_step=None if accs is None else accs[i], logprob=value)
    return None


def detect_collapse(
    steps: Sequence[int],
    rankme: Sequence[float],
    *,
    min_drop: float = 0.25,
    recovery_fraction: float = 0.10,
    recovery_evals: int = 2,
    smoothing: int = 3,
    until_step: int | None = None,
) -> Collapse | None:
    """A layer's RankMe collapse and its recovery, on a plain series (spec §7).

    1. Keep the finite points with step <= `until_step` (NaN marks a skipped measurement).
    2. Smooth: centred moving average of `smoothing` points, the window shrinking at the edges.
    3. The trough is the lowest smoothed point (first occurrence) among those whose drop from the
       highest smoothed value at or before them (the peak) is at least `min_drop` of that peak:
       (peak - trough) >= min_drop * peak. When the global minimum qualifies this is simply the global
       argmin; restricting to qualifying points also catches the common shape where RankMe starts low,
       expands, then collapses to a value still above the initial one (21 -> 94 -> 31 in spec §7).
    4. floor = the minimum raw value from the peak onward (the raw series dips below the smoothed one;
       values before the peak are the initial expansion, not the collapse).
    5. Recovery: the first time after the trough that the smoothed value has been
       >= trough + recovery_fraction * (peak - trough) for `recovery_evals` consecutive evaluations;
       the step reported is the last of those, when recovery is confirmed.

    O(n) with numpy, so calling it on a growing prefix at every evaluation (as the live tracker does)
    is cheap. Smoothed values at the end of a prefix use a shrunk window and may change as points
    arrive.

    Args:
        steps: the evaluation steps, strictly increasing.
        rankme: RankMe at each step (NaN/Inf points are ignored).
        min_drop: least drop from peak to trough, as a fraction of the peak, in (0, 1).
        recovery_fraction: rise above the trough that confirms recovery, as a fraction of the drop,
            in (0, 1].
        recovery_evals: consecutive evaluations the rise must hold, >= 1.
        smoothing: moving-average width, an odd integer >= 1 (1 disables smoothing).
        until_step: consider only points with step <= until_step (None: all).

    Returns:
        A `Collapse`, or None if no point qualifies.

    Raises:
        ValueError: on mismatched lengths, non-increasing steps or out-of-range settings.
    """
    _check_collapse_settings(min_drop, recovery_fraction, recovery_evals, smoothing)
    step_list = _check_steps(steps)
    values = np.asarray(_as_floats("rankme", rankme, len(step_list)), dtype=np.float64)
    keep = np.isfinite(values)
    if until_step is not None:
        keep &= np.asarray(step_list, dtype=np.int64) <= int(until_step)
    index = np.flatnonzero(keep)
    if index.size == 0:
        return None
    raw = values[index]
    smooth = _moving_average(raw, smoothing)
    running_peak = np.maximum.accumulate(smooth)
    drop = running_peak - smooth
    qualifies = (drop >= min_drop * running_peak) & (drop > 0) & (running_peak > 0)
    if not qualifies.any():
        return None
    candidates = np.flatnonzero(qualifies)
    trough = int(candidates[np.argmin(smooth[candidates])])  # first occurrence of the lowest
    peak_value = float(running_peak[trough])
    peak = int(np.argmax(smooth[: trough + 1]))  # first occurrence of the peak
    trough_value = float(smooth[trough])
    level = trough_value + recovery_fraction * (peak_value - trough_value)
    recovery = None
    run = 0
    for j in range(trough + 1, smooth.size):
        run = run + 1 if smooth[j] >= level else 0
        if run == recovery_evals:
            recovery = step_list[int(index[j])]
            break
    return Collapse(
        step=step_list[int(index[trough])],
        floor=float(raw[peak:].min()),
        peak=peak_value,
        peak_step=step_list[int(index[peak])],
        drop_fraction=(peak_value - trough_value) / peak_value,
        recovery_step=recovery,
    )


def precursor_verdict(
    steps: Sequence[int], acquisition_step: int | None, collapse: Collapse | None, window: int = 3
) -> Verdict:
    """The verdict for one layer: did its collapse-and-recovery come before acquisition?

    In order:
    - not acquired -> "not-acquired"; no collapse -> "no-collapse" (gap None);
    - trough within `window` evaluations of the acquisition evaluation, either side -> "simultaneous";
    - trough later than that -> "no-collapse": a collapse that comes only after the capability is a
      consequence of learning it, not a precursor (gap None);
    - trough earlier and recovery confirmed at or before the acquisition step -> "precursor";
    - trough earlier but recovery not confirmed by acquisition -> "simultaneous" (geometry and behaviour
      turn together).
    The gap is acquisition step minus collapse step. Pass a collapse found with `until_step` =
    the step `window` evaluations after acquisition (as `layer_verdict` does), so that a deeper collapse
    after acquisition does not mask an earlier one.

    Args:
        steps: the evaluation steps, strictly increasing; must contain both steps compared.
        acquisition_step: from `detect_acquisition`.
        collapse: from `detect_collapse`.
        window: evaluations either side of acquisition that count as simultaneous, >= 0.

    Raises:
        ValueError: if a step compared is not in `steps`, or on a bad window.
    """
    _check_int("window", window, 0)
    if acquisition_step is None:
        return Verdict("not-acquired", None)
    if collapse is None:
        return Verdict("no-collapse", None)
    step_list = _check_steps(steps)
    position = {step: i for i, step in enumerate(step_list)}
    for name, step in (("acquisition_step", acquisition_step), ("collapse step", collapse.step)):
        if step not in position:
            raise ValueError(f"{name} {step} is not one of the evaluation steps")
    gap = int(acquisition_step) - collapse.step
    offset = position[collapse.step] - position[acquisition_step]
    if abs(offset) <= window:
        return Verdict("simultaneous", gap)
    if offset > 0:
        return Verdict("no-collapse", None)
    if collapse.recovery_step is not None and collapse.recovery_step <= acquisition_step:
        return Verdict("precursor", gap)
    return Verdict("simultaneous", gap)


def layer_verdict(
    steps: Sequence[int],
    rankme: Sequence[float],
    acc: Sequence[float],
    *,
    threshold: float = 0.5,
    patience: int = 3,
    window: int = 3,
    **collapse_kwargs: Any,
) -> LayerResult:
    """Acquisition, collapse and verdict for one layer, wired as spec §7 means them.

    The collapse for the verdict is searched up to the step `window` evaluations after acquisition
    (the whole series when not acquired); the whole-series collapse gives the floor.

    Args:
        steps: the evaluation steps, strictly increasing.
        rankme: the layer's RankMe at each step (NaN where not measured).
        acc: the run's accuracy at each step.
        threshold: acquisition threshold.
        patience: acquisition patience.
        window: simultaneity window, in evaluations.
        **collapse_kwargs: `min_drop`, `recovery_fraction`, `recovery_evals`, `smoothing` for
            `detect_collapse`.

    Raises:
        TypeError: on an unknown keyword (`until_step` is set here).
        ValueError: as the functions it calls.
    """
    unknown = sorted(set(collapse_kwargs) - set(_COLLAPSE_KWARGS))
    if unknown:
        raise TypeError(f"unknown collapse settings {unknown}; valid: {', '.join(_COLLAPSE_KWARGS)}")
    _check_int("window", window, 0)
    step_list = _check_steps(steps)
    acquisition = detect_acquisition(step_list, acc, threshold=threshold, patience=patience)
    until = None
    if acquisition is not None:
        until = step_list[min(step_list.index(acquisition) + window, len(step_list) - 1)]
    collapse = detect_collapse(step_list, rankme, until_step=until, **collapse_kwargs)
    whole = collapse if until is None else detect_collapse(step_list, rankme, **collapse_kwargs)
    finite = [v for v in _as_floats("rankme", rankme, len(step_list)) if math.isfinite(v)]
    return LayerResult(
        acquisition_step=acquisition,
        collapse=collapse,
        verdict=precursor_verdict(step_list, acquisition, collapse, window=window),
        whole_series_collapse=whole,
        floor=None if whole is None else whole.floor,
        min_rankme=min(finite) if finite else None,
    )


def run_verdict(layer_results: Mapping[str, LayerResult]) -> Verdict:
    """The run's verdict from its layers': "precursor" if any layer is, else "simultaneous" if any is.

    The gap is the largest among the layers with that verdict (the earliest collapse), and `layer` says
    which; otherwise "no-collapse" if the run acquired, else "not-acquired".

    Raises:
        ValueError: if `layer_results` is empty.
    """
    if not layer_results:
        raise ValueError("run_verdict needs at least one layer result")
    for name in ("precursor", "simultaneous"):
        matches = [(r.verdict.gap, layer) for layer, r in layer_results.items() if r.verdict.verdict == name]
        if matches:
            gap, layer = max(matches, key=lambda m: m[0] if m[0] is not None else -math.inf)
            return Verdict(name, gap, layer)  # type: ignore[arg-type]
    acquired = any(r.acquisition_step is not None for r in layer_results.values())
    return Verdict("no-collapse" if acquired else "not-acquired", None)


TRANSITION_KINDS = ("collapse", "crossing", "change")


@dataclass(frozen=True)
class Transition:
    """A measure's own transition and whether it came before acquisition.

    Attributes:
        kind: how the transition is found (see :func:`measure_transition`).
        step: the transition step, or None if the series shows none.
        precedes_acquisition: True if the transition lies more than `window` evaluations before the
            acquisition evaluation; False if it does not (or there is no transition); None if the run
            never acquired.
    """

    kind: str
    step: int | None
    precedes_acquisition: bool | None


def measure_transition(
    steps: Sequence[int],
    values: Sequence[float],
    acquisition_step: int | None,
    kind: str = "collapse",
    *,
    threshold: float = 0.5,
    window: int = 3,
    reference_steps: Sequence[int] | None = None,
    **collapse_kwargs: Any,
) -> Transition:
    """The transition of any measured series, for the per-measure precursor rate (spec §7, issue 4).

    Kinds: ``collapse`` -- the collapse step of :func:`detect_collapse` (dimension-like measures:
    RankMe, gradient ranks); ``crossing`` -- the first evaluation at or above `threshold` (probe
    accuracy: the answer becomes linearly readable); ``change`` -- the evaluation after the largest
    absolute step-to-step change of the 3-point smoothed series (sharpness, LLC).

    Only the series up to `window` evaluations after acquisition is searched, so a late change does
    not mask an earlier one. Evaluations are counted on `reference_steps` (the accuracy series' steps,
    since a costly measure may run only every n evaluations), by default on `steps` themselves.
    """
    if kind not in TRANSITION_KINDS:
        raise ValueError(f"unknown transition kind {kind!r}; valid: {', '.join(TRANSITION_KINDS)}")
    _check_int("window", window, 0)
    step_list = _check_steps(steps)
    series = _as_floats("values", values, len(step_list))
    # evaluations of this series before acquisition (it may be measured every n evaluations only)
    acq_index = len(step_list) if acquisition_step is None else bisect.bisect_left(step_list, acquisition_step)
    step_list, series = step_list[: acq_index + window + 1], series[: acq_index + window + 1]
    found: int | None = None
    if kind == "collapse":
        collapse = detect_collapse(step_list, series, **collapse_kwargs) if len(step_list) >= 2 else None
        found = None if collapse is None else collapse.step
    elif kind == "crossing":
        found = next((st for st, v in zip(step_list, series, strict=True) if v >= threshold), None)
    elif len(step_list) >= 2:
        smoothed = _moving_average(np.asarray(series, dtype=float), 3)
        jumps = np.abs(np.diff(smoothed))
        if np.isfinite(jumps).any() and np.nanmax(jumps) > 0:
            found = step_list[int(np.nanargmax(jumps)) + 1]
    if acquisition_step is None:
        return Transition(kind, found, None)
    if found is None:
        return Transition(kind, None, False)
    reference = _check_steps(reference_steps) if reference_steps is not None else step_list
    apart = bisect.bisect_left(reference, acquisition_step) - bisect.bisect_left(reference, found)
    return Transition(kind, found, apart > window)


def layer_order(collapse_steps: Mapping[str, int | None], depths: Mapping[str, int]) -> float | None:
    """Spearman rank correlation of layer depth with collapse step, over the layers that collapsed.

    rho = Pearson correlation of the average ranks (ties share the mean of their ranks). Negative means
    top-down: deeper layers collapse first.

    Args:
        collapse_steps: collapse step per layer (None: no collapse, left out).
        depths: depth per layer (0 = nearest the input); every collapsed layer needs one.

    Returns:
        rho in [-1, 1], or None with fewer than 2 collapsed layers or no variation in either.

    Raises:
        ValueError: if a collapsed layer has no depth.
    """
    names = [name for name, step in collapse_steps.items() if step is not None]
    missing = [name for name in names if name not in depths]
    if missing:
        raise ValueError(f"no depth for layers {missing}; depths given for: {', '.join(depths) or 'none'}")
    if len(names) < 2:
        return None
    depth_ranks = _average_ranks([float(depths[name]) for name in names])
    step_ranks = _average_ranks([float(collapse_steps[name]) for name in names])  # type: ignore[arg-type]
    return _pearson(depth_ranks, step_ranks)


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman rank correlation of two equal-length sequences.

    rho = Pearson correlation of the average ranks (ties share the mean of their ranks), as
    `scipy.stats.spearmanr` computes it; the same statistic as :func:`layer_order`, for any pair of series
    (the report uses it to compare RankMe curves across model sizes).

    Args:
        x: first sequence of finite values.
        y: second sequence, the same length.

    Returns:
        rho in [-1, 1], or None with fewer than 2 points or no variation in either sequence.

    Raises:
        ValueError: on mismatched lengths or a non-finite value.
    """
    xs = _as_floats("x", x, len(x))
    ys = _as_floats("y", y, len(x))
    if not all(math.isfinite(v) for v in (*xs, *ys)):
        raise ValueError("spearman needs finite values; drop NaN/Inf points first")
    if len(xs) < 2:
        return None
    return _pearson(_average_ranks(xs), _average_ranks(ys))


class PrecursorTracker:
    """Live precursor detection: feed it each evaluation, it returns the alerts newly raised.

    A layer alert is raised the first time that layer's collapse and recovery are both confirmed
    (`detect_collapse` on its series so far) while the run has not acquired; the run alert the first
    time any layer raises (with that layer). Nothing is raised twice, and nothing after acquisition.
    A later verdict can still be "simultaneous" if acquisition turns out to start before the recovery
    (acquisition is only confirmed `patience` evaluations after its step).

    Args:
        threshold: accuracy threshold of acquisition, in (0, 1].
        patience: consecutive evaluations at or above the threshold, >= 1.
        window: evaluations within which collapse and acquisition count as simultaneous, >= 0.
        min_drop: least peak-to-trough drop, as a fraction of the peak, in (0, 1).
        recovery_fraction: rise from the trough confirming recovery, as a fraction of the drop, in (0, 1].
        recovery_evals: consecutive evaluations the rise must hold, >= 1.
        smoothing: centred moving-average width, odd, >= 1.

    Raises:
        ValueError: on a value out of its range (the message gives the range).

    Example::

        tracker = PrecursorTracker()
        for step, acc, ranks in evaluations:
            for alert in tracker.update(step, acc, ranks):
                print(alert)
        summary = tracker.summary()
    """

    def __init__(
        self,
        threshold: float = 0.5,
        patience: int = 3,
        window: int = 3,
        min_drop: float = 0.25,
        recovery_fraction: float = 0.10,
        recovery_evals: int = 2,
        smoothing: int = 3,
    ) -> None:
        _check_threshold(threshold)
        _check_int("patience", patience, 1)
        _check_int("window", window, 0)
        _check_collapse_settings(min_drop, recovery_fraction, recovery_evals, smoothing)
        self.threshold = float(threshold)
        self.patience = patience
        self.window = window
        self.min_drop = float(min_drop)
        self.recovery_fraction = float(recovery_fraction)
        self.recovery_evals = recovery_evals
        self.smoothing = smoothing
        self._steps: list[int] = []
        self._acc: list[float] = []
        self._rankme: dict[str, list[float]] = {}
        self._raised_layers: set[str] = set()
        self._run_raised = False
        self._alerts: list[Alert] = []
        self._acquired: int | None = None

    @property
    def settings(self) -> dict[str, float | int]:
        """The detection settings, as given to the constructor."""
        return {"threshold": self.threshold, "patience": self.patience, "window": self.window,
                "min_drop": self.min_drop, "recovery_fraction": self.recovery_fraction,
                "recovery_evals": self.recovery_evals, "smoothing": self.smoothing}

    @property
    def steps(self) -> list[int]:
        """The evaluation steps seen so far (a copy)."""
        return list(self._steps)

    @property
    def acc(self) -> list[float]:
        """The accuracy at each evaluation (a copy; NaN where missing)."""
        return list(self._acc)

    @property
    def layers(self) -> list[str]:
        """The layers seen so far, in order of first appearance."""
        return list(self._rankme)

    @property
    def acquired_step(self) -> int | None:
        """The acquisition step, once confirmed; None before."""
        return self._acquired

    @property
    def alerts(self) -> list[Alert]:
        """Every alert raised so far, in order."""
        return list(self._alerts)

    def rankme_series(self) -> dict[str, list[list[float]]]:
        """Per layer, the measured points as [step, value] pairs (missing evaluations left out)."""
        return {name: [[step, value] for step, value in zip(self._steps, values, strict=True)
                       if math.isfinite(value)] for name, values in self._rankme.items()}

    def update(self, step: int, acc: float, rankme_by_layer: Mapping[str, float]) -> list[Alert]:
        """Record one evaluation and return the alerts it raises (usually none).

        A step at or before the last one recorded (a repeated validation, a resumed run) replaces the
        evaluations from that step on; alerts already raised stay raised.

        Args:
            step: the training step of the evaluation.
            acc: the accuracy (NaN: missing, counts as below the threshold).
            rankme_by_layer: RankMe per layer at this step; a layer left out, or NaN, is a skipped
                measurement.

        Raises:
            ValueError: if a value is not a real number.
        """
        step = _as_step(step)
        acc_value = _as_float("acc", acc)
        if self._steps and step <= self._steps[-1]:
            keep = sum(1 for s in self._steps if s < step)
            del self._steps[keep:], self._acc[keep:]
            for values in self._rankme.values():
                del values[keep:]
        self._steps.append(step)
        self._acc.append(acc_value)
        for name in rankme_by_layer:
            if not isinstance(name, str):
                raise ValueError(f"layer names must be strings, got {name!r}")
            self._rankme.setdefault(name, [math.nan] * (len(self._steps) - 1))
        for name, values in self._rankme.items():
            value = _as_float(f"rankme[{name!r}]", rankme_by_layer.get(name, math.nan))
            values.append(value if math.isfinite(value) else math.nan)
        self._acquired = detect_acquisition(self._steps, self._acc, self.threshold, self.patience)
        if self._acquired is not None:
            return []
        raised: list[Alert] = []
        for name, values in self._rankme.items():
            if name in self._raised_layers:
                continue
            collapse = detect_collapse(self._steps, values, **self._collapse_settings())
            if collapse is None or collapse.recovery_step is None:
                continue
            self._raised_layers.add(name)
            raised.append(Alert("layer", name, step, collapse.step, collapse.floor, collapse.recovery_step))
        if raised and not self._run_raised:
            self._run_raised = True
            first = raised[0]
            raised.append(Alert("run", first.layer, step, first.collapse_step, first.floor,
                                first.recovery_step))
        self._alerts.extend(raised)
        return raised

    def layer_results(self) -> dict[str, LayerResult]:
        """`layer_verdict` for every layer on the series so far."""
        return {name: layer_verdict(self._steps, values, self._acc, threshold=self.threshold,
                                    patience=self.patience, window=self.window, **self._collapse_settings())
                for name, values in self._rankme.items()}

    def summary(self, depths: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The run's detection results as a JSON-able dict.

        Keys: `settings`; `acquisition_step`; `verdict`, `gap`, `verdict_layer` (the run verdict);
        `layers` (per layer: `collapse_step`, `collapse_floor`, `peak`, `peak_step`, `drop_fraction`,
        `recovery_step` of the collapse the verdict is about, `floor` of the whole series, `min_rankme`,
        `verdict`, `gap`); `layer_order_rho` (with `depths`, else None); `alerts`; `series`
        (`acc` and `rankme/<layer>` as [step, value] pairs).

        Args:
            depths: depth per layer for the layer order (optional).
        """
        results = self.layer_results()
        if results:
            run = run_verdict(results)
        else:
            run = Verdict("not-acquired" if self._acquired is None else "no-collapse", None)
        layers: dict[str, dict[str, Any]] = {}
        for name, result in results.items():
            collapse = result.collapse
            layers[name] = {
                "collapse_step": None if collapse is None else collapse.step,
                "collapse_floor": None if collapse is None else collapse.floor,
                "peak": None if collapse is None else collapse.peak,
                "peak_step": None if collapse is None else collapse.peak_step,
                "drop_fraction": None if collapse is None else collapse.drop_fraction,
                "recovery_step": None if collapse is None else collapse.recovery_step,
                "floor": result.floor,
                "min_rankme": result.min_rankme,
                "verdict": result.verdict.verdict,
                "gap": result.verdict.gap,
            }
        rho = None
        if depths is not None:
            rho = layer_order({name: info["collapse_step"] for name, info in layers.items()}, depths)
        series: dict[str, list[list[float]]] = {
            "acc": [[s, a] for s, a in zip(self._steps, self._acc, strict=True) if math.isfinite(a)]}
        series.update({f"rankme/{name}": points for name, points in self.rankme_series().items()})
        return {
            "settings": self.settings,
            "acquisition_step": self._acquired,
            "verdict": run.verdict,
            "gap": run.gap,
            "verdict_layer": run.layer,
            "layers": layers,
            "layer_order_rho": rho,
            "alerts": [asdict(alert) for alert in self._alerts],
            "series": series,
        }

    def state_dict(self) -> dict[str, Any]:
        """Series and raised-alert memory as a plain JSON-able dict (NaN stored as None)."""
        return {
            "steps": list(self._steps),
            "acc": [_nan_to_none(a) for a in self._acc],
            "rankme": {name: [_nan_to_none(v) for v in values] for name, values in self._rankme.items()},
            "raised_layers": sorted(self._raised_layers),
            "run_raised": self._run_raised,
            "alerts": [asdict(alert) for alert in self._alerts],
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what `state_dict` saved; missing keys leave an empty state for that part.

        The settings are the constructor's, not restored.

        Raises:
            ValueError: if the saved series have inconsistent lengths.
        """
        steps = [_as_step(s) for s in state_dict.get("steps", [])]
        acc = [_none_to_nan(a) for a in state_dict.get("acc", [math.nan] * len(steps))]
        rankme = {str(name): [_none_to_nan(v) for v in values]
                  for name, values in state_dict.get("rankme", {}).items()}
        if len(acc) != len(steps) or any(len(v) != len(steps) for v in rankme.values()):
            raise ValueError(f"inconsistent tracker state: {len(steps)} steps, {len(acc)} acc values, "
                             f"RankMe lengths {sorted({len(v) for v in rankme.values()})}")
        _check_steps(steps)
        self._steps, self._acc, self._rankme = steps, acc, rankme
        self._raised_layers = {str(name) for name in state_dict.get("raised_layers", [])}
        self._run_raised = bool(state_dict.get("run_raised", False))
        self._alerts = [Alert(**alert) for alert in state_dict.get("alerts", [])]
        self._acquired = detect_acquisition(steps, acc, self.threshold, self.patience) if steps else None

    def _collapse_settings(self) -> dict[str, Any]:
        return {"min_drop": self.min_drop, "recovery_fraction": self.recovery_fraction,
                "recovery_evals": self.recovery_evals, "smoothing": self.smoothing}


def _moving_average(values: np.ndarray, width: int) -> np.ndarray:
    """Centred moving average of `width` (odd) points; the window shrinks at the edges."""
    if width == 1:
        return values.copy()
    half = width // 2
    n = values.size
    cumulative = np.concatenate(([0.0], np.cumsum(values)))
    i = np.arange(n)
    lo = np.maximum(i - half, 0)
    hi = np.minimum(i + half + 1, n)
    return (cumulative[hi] - cumulative[lo]) / (hi - lo)


def _average_ranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n, ties given the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def _pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson correlation, None when either side has no variation."""
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return None
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def _check_steps(steps: Sequence[int]) -> list[int]:
    step_list = [_as_step(s) for s in steps]
    for i in range(1, len(step_list)):
        if step_list[i] <= step_list[i - 1]:
            raise ValueError(f"steps must be strictly increasing; got {step_list[i]} after "
                             f"{step_list[i - 1]} (position {i})")
    return step_list


def _as_step(step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        if isinstance(step, (float, np.floating)) and float(step).is_integer():
            return int(step)
        raise ValueError(f"a step must be an integer, got {step!r}")
    return int(step)


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _as_float(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}") from None


def _as_floats(name: str, values: Sequence[float], length: int) -> list[float]:
    out = [_as_float(name, v) for v in values]
    if len(out) != length:
        raise ValueError(f"{name} has {len(out)} values but there are {length} steps")
    return out


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_threshold(threshold: Any) -> None:
    if not _is_real(threshold) or not 0 < threshold <= 1:
        raise ValueError(f"threshold must be an accuracy in (0, 1], got {threshold!r}")


def _check_collapse_settings(
    min_drop: Any, recovery_fraction: Any, recovery_evals: Any, smoothing: Any
) -> None:
    if not _is_real(min_drop) or not 0 < min_drop < 1:
        raise ValueError(f"min_drop must be in (0, 1) (a fraction of the peak), got {min_drop!r}")
    if not _is_real(recovery_fraction) or not 0 < recovery_fraction <= 1:
        raise ValueError(
            f"recovery_fraction must be in (0, 1] (a fraction of the drop), got {recovery_fraction!r}")
    _check_int("recovery_evals", recovery_evals, 1)
    if isinstance(smoothing, bool) or not isinstance(smoothing, (int, np.integer)) or smoothing < 1 or (
            smoothing % 2 == 0):
        raise ValueError(
            f"smoothing must be an odd integer >= 1 (a centred window; 1 disables it), got {smoothing!r}")


def _nan_to_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _none_to_nan(value: Any) -> float:
    return math.nan if value is None else float(value)
