"""capgeo: watch the geometry of a transformer's hidden states while it trains.

Measures are pure functions on tensors; callbacks are Lightning glue around them; detection works on
plain (step, value) series, live or offline; the run summary has one builder; each measure describes
itself in the measure registry (:mod:`capgeo_callbacks.registry`, docs/measures.md). Definitions:
docs/design.md.
"""

from capgeo_callbacks.callbacks import (
    EvaluationSchedule,
    GradientMeasureCallback,
    GradientRankMonitor,
    HessianMonitor,
    LinearProbeMonitor,
    LLCMonitor,
    MeasureCallback,
    PrecursorDetector,
    RankMeMonitor,
)
from capgeo_callbacks.callbacks._hidden import HiddenStateMonitor
from capgeo_callbacks.capture.batches import answer_cross_entropy
from capgeo_callbacks.capture.hooks import HiddenStateCapture
from capgeo_callbacks.capture.layers import glob_match, resolve_layers
from capgeo_callbacks.detection import (
    Alert,
    Collapse,
    DetectionSettings,
    Verdict,
    detect_acquisition,
    detect_collapse,
    detect_logprob_emergence,
    detect_run,
    layer_order,
    precursor_verdict,
    replay_alerts,
    spearman,
)
from capgeo_callbacks.measures import (
    effective_rank,
    estimate_llc,
    gradient_covariance_rank,
    gradient_effective_rank,
    hessian_top_eigenvalues,
    hessian_trace,
    linear_probe_accuracy,
    per_example_gradients,
    rankme,
)
from capgeo_callbacks.registry import (
    MeasureSpec,
    build_measure_callbacks,
    get_measure,
    measure_specs,
    register_measure,
    resolve_measures,
    unregister_measure,
)
from capgeo_callbacks.rules import Forecast, Rule, RunView
from capgeo_callbacks.run.schedule import evaluation_steps
from capgeo_callbacks.run.summary import SUMMARY_FILENAME, build_summary, read_summary
from capgeo_callbacks.run.tracker import RunTracker

__all__ = [
    "SUMMARY_FILENAME",
    "Alert",
    "Collapse",
    "DetectionSettings",
    "EvaluationSchedule",
    "GradientMeasureCallback",
    "GradientRankMonitor",
    "HessianMonitor",
    "HiddenStateCapture",
    "HiddenStateMonitor",
    "LLCMonitor",
    "LinearProbeMonitor",
    "MeasureCallback",
    "MeasureSpec",
    "PrecursorDetector",
    "RunTracker",
    "Rule",
    "RunView",
    "Forecast",
    "RankMeMonitor",
    "Verdict",
    "answer_cross_entropy",
    "build_measure_callbacks",
    "build_summary",
    "detect_acquisition",
    "detect_collapse",
    "detect_logprob_emergence",
    "detect_run",
    "effective_rank",
    "estimate_llc",
    "evaluation_steps",
    "get_measure",
    "glob_match",
    "gradient_covariance_rank",
    "gradient_effective_rank",
    "hessian_top_eigenvalues",
    "hessian_trace",
    "layer_order",
    "linear_probe_accuracy",
    "measure_specs",
    "per_example_gradients",
    "precursor_verdict",
    "rankme",
    "read_summary",
    "register_measure",
    "replay_alerts",
    "resolve_layers",
    "resolve_measures",
    "spearman",
    "unregister_measure",
]
