"""capgeo: watch the geometry of a transformer's hidden states while it trains.

Measures are pure functions on tensors; callbacks are Lightning glue around them; detection works on
plain (step, value) series, live or offline; the run summary has one builder. Definitions:
docs/design.md.
"""

from capgeo_callbacks.batches import answer_cross_entropy
from capgeo_callbacks.callbacks import (
    EvaluationSchedule,
    GradientRankMonitor,
    HessianMonitor,
    LinearProbeMonitor,
    LLCMonitor,
    MeasureCallback,
    PrecursorDetector,
    RankMeMonitor,
)
from capgeo_callbacks.capture import HiddenStateCapture
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
from capgeo_callbacks.layers import glob_match, resolve_layers
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
from capgeo_callbacks.rules import Forecast, Rule, RunView
from capgeo_callbacks.schedule import evaluation_steps
from capgeo_callbacks.summary import SUMMARY_FILENAME, build_summary, read_summary
from capgeo_callbacks.tracking import RunTracker

__all__ = [
    "SUMMARY_FILENAME",
    "Alert",
    "Collapse",
    "DetectionSettings",
    "EvaluationSchedule",
    "GradientRankMonitor",
    "HessianMonitor",
    "HiddenStateCapture",
    "LLCMonitor",
    "LinearProbeMonitor",
    "MeasureCallback",
    "PrecursorDetector",
    "RunTracker",
    "Rule",
    "RunView",
    "Forecast",
    "RankMeMonitor",
    "Verdict",
    "answer_cross_entropy",
    "build_summary",
    "detect_acquisition",
    "detect_collapse",
    "detect_logprob_emergence",
    "detect_run",
    "effective_rank",
    "estimate_llc",
    "evaluation_steps",
    "glob_match",
    "gradient_covariance_rank",
    "gradient_effective_rank",
    "hessian_top_eigenvalues",
    "hessian_trace",
    "layer_order",
    "linear_probe_accuracy",
    "per_example_gradients",
    "precursor_verdict",
    "rankme",
    "read_summary",
    "replay_alerts",
    "resolve_layers",
    "spearman",
]
