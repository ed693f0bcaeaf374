"""Detection on plain series
=========================

Acquisition, log-prob emergence, RankMe collapse and recovery, alerts, verdicts, layer order and each
measure's transition, all on plain ``(step, value)`` sequences, so that the same code runs live (the run
session) and offline (analysis of checkpoints, re-scoring a folder of runs). No torch and no Lightning here.
Definitions: docs/design.md, "Detection".
"""

from capgeo_callbacks.detection.alerts import Alert, CollapseAlert, alert_from_record, scan_alerts
from capgeo_callbacks.detection.events import (
    Collapse,
    Emergence,
    LayerResult,
    Verdict,
    detect_acquisition,
    detect_collapse,
    detect_logprob_emergence,
    layer_verdict,
    precursor_verdict,
    run_verdict,
)
from capgeo_callbacks.detection.labels import HOLD_LEVELS, Chance, RunLabels, at_chance, detect_hold, label_run
from capgeo_callbacks.detection.order import layer_order, spearman
from capgeo_callbacks.detection.run import detect_run
from capgeo_callbacks.detection.series import Points, align, append_point, split_points
from capgeo_callbacks.detection.settings import (
    DEFAULT_SETTINGS,
    MEASURE_TRANSITIONS,
    TRANSITION_KINDS,
    DetectionSettings,
    transition_kind,
)
from capgeo_callbacks.detection.transitions import Transition, measure_transition

__all__ = [
    "DEFAULT_SETTINGS",
    "HOLD_LEVELS",
    "Chance",
    "RunLabels",
    "at_chance",
    "detect_hold",
    "label_run",
    "MEASURE_TRANSITIONS",
    "TRANSITION_KINDS",
    "Alert",
    "CollapseAlert",
    "alert_from_record",
    "Collapse",
    "DetectionSettings",
    "Emergence",
    "LayerResult",
    "Points",
    "Transition",
    "Verdict",
    "align",
    "append_point",
    "detect_acquisition",
    "detect_collapse",
    "detect_logprob_emergence",
    "detect_run",
    "layer_order",
    "layer_verdict",
    "measure_transition",
    "precursor_verdict",
    "run_verdict",
    "scan_alerts",
    "spearman",
    "split_points",
    "transition_kind",
]
