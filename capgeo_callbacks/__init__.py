"""capgeo: watch the geometry of a transformer's hidden states while it trains.

Measures are pure functions on tensors; callbacks are Lightning glue around them; detection works on
plain (step, value) series, live or offline.
"""

from capgeo_callbacks.callbacks import (
    GradientRankMonitor,
    HessianMonitor,
    LinearProbeMonitor,
    LLCMonitor,
    MeasureCallback,
    PrecursorDetector,
    RankMeMonitor,
    answer_cross_entropy,
)
from capgeo_callbacks.detection import (
    Alert,
    Collapse,
    PrecursorTracker,
    Verdict,
    detect_acquisition,
    detect_collapse,
    detect_logprob_emergence,
    layer_order,
    precursor_verdict,
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

__all__ = [
    "GradientRankMonitor",
    "HessianMonitor",
    "LLCMonitor",
    "LinearProbeMonitor",
    "answer_cross_entropy",
    "Alert",
    "Collapse",
    "MeasureCallback",
    "PrecursorDetector",
    "PrecursorTracker",
    "RankMeMonitor",
    "Verdict",
    "detect_acquisition",
    "detect_collapse",
    "detect_logprob_emergence",
    "effective_rank",
    "estimate_llc",
    "gradient_covariance_rank",
    "gradient_effective_rank",
    "hessian_top_eigenvalues",
    "hessian_trace",
    "linear_probe_accuracy",
    "per_example_gradients",
    "glob_match",
    "layer_order",
    "precursor_verdict",
    "rankme",
    "resolve_layers",
    "spearman",
]
