"""Everything detection finds in one run's series: acquisition, per-layer collapse and verdicts, the run
verdict, layer order, log-prob emergence and each measure's transition. Live and offline summaries are
built from this one function."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capgeo_callbacks.detection.events import (
    Verdict,
    detect_acquisition,
    detect_logprob_emergence,
    layer_verdict,
    run_verdict,
)
from capgeo_callbacks.detection.labels import Chance, label_run
from capgeo_callbacks.detection.order import layer_order
from capgeo_callbacks.detection.series import Points, align, aligned_layers, split_points
from capgeo_callbacks.detection.settings import DEFAULT_SETTINGS, DetectionSettings, transition_kind
from capgeo_callbacks.detection.transitions import measure_transition


def detect_run(
    acc: Points,
    rankme: Mapping[str, Points],
    settings: DetectionSettings = DEFAULT_SETTINGS,
    *,
    logprob: Points | None = None,
    measures: Mapping[str, Points] | None = None,
    token_acc: Points | None = None,
    warmup_steps: int | None = None,
    max_steps: int | None = None,
    chance: Chance | None = None,
) -> dict[str, Any]:
    """Detection results of one run, as a JSON-able dict.

    Args:
        acc: ``[[step, accuracy], ...]`` at every evaluation: its steps are the run's evaluation steps.
        rankme: per layer, in depth order (nearest the input first), its ``[[step, RankMe], ...]``.
        settings: detection settings.
        logprob: ``[[step, mean answer log-prob], ...]`` for log-prob emergence (optional).
        measures: every measured series by tag (``rankme/<layer>``, ``probe_acc/<layer>``, ``llc``, ...);
            those with a kind in ``settings.measure_transitions`` get a transition.
        token_acc: ``[[step, per-token accuracy], ...]`` (optional; for the chance label).
        warmup_steps, max_steps: the learning-rate warm-up and the budget (optional; for the late label).
        chance: what an input-independent answer scores (optional; for the chance label).

    Returns:
        ``settings``; ``acquisition_step``; ``verdict``, ``gap``, ``verdict_layer`` (the run's verdict);
        ``layers`` (per layer: ``collapse_step``, ``collapse_floor``, ``peak``, ``peak_step``,
        ``drop_fraction``, ``recovery_step`` of the collapse the verdict is about, ``floor`` of the whole
        series, ``min_rankme``, ``verdict``, ``gap``); ``layer_order_rho`` (depth = position in ``rankme``);
        ``logprob_emergence_step`` and ``acc_at_logprob_emergence``; ``measures`` (per tag: ``kind``,
        ``transition_step``, ``precedes_acquisition``).
    """
    steps, accs = split_points(acc)
    acquisition = detect_acquisition(steps, accs, settings.threshold, settings.patience) if steps else None
    results = {name: layer_verdict(steps, values, accs, settings)
               for name, values in aligned_layers(rankme, steps).items()}
    run = run_verdict(results, acquired=acquisition is not None) if steps else Verdict("not-acquired", None)
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
    depths = {name: depth for depth, name in enumerate(rankme)}
    rho = layer_order({name: info["collapse_step"] for name, info in layers.items()}, depths)
    emergence = None
    if logprob:
        logprob_steps, logprob_values = split_points(logprob)
        emergence = detect_logprob_emergence(logprob_steps, logprob_values, align(acc, logprob_steps),
                                             settings.logprob_threshold)
    transitions: dict[str, dict[str, Any]] = {}
    for tag, points in (measures or {}).items():
        kind = transition_kind(tag, settings.measure_transitions)
        if kind is None or len(points) < 2:
            continue
        tag_steps, values = split_points(points)
        transition = measure_transition(tag_steps, values, acquisition, kind, settings, reference_steps=steps)
        transitions[tag] = {"kind": transition.kind, "transition_step": transition.step,
                            "precedes_acquisition": transition.precedes_acquisition}
    labels = label_run(steps, accs, settings, warmup_steps=warmup_steps, max_steps=max_steps, chance=chance,
                       token_acc=align(token_acc, steps) if token_acc else (),
                       logprob=align(logprob, steps) if logprob else ())
    return {
        "settings": settings.to_dict(),
        "acquisition_step": acquisition,
        "labels": labels.to_dict(),
        "verdict": run.verdict,
        "gap": run.gap,
        "verdict_layer": run.layer,
        "layers": layers,
        "layer_order_rho": rho,
        "logprob_emergence_step": None if emergence is None else emergence.step,
        "acc_at_logprob_emergence": None if emergence is None else emergence.acc_at_step,
        "measures": transitions,
    }
