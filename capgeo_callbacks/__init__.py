"""capgeo: watch the geometry of a transformer's hidden states while it trains.

Measures are pure functions on tensors; callbacks are Lightning glue around them; detection works on
plain (step, value) series, live or offline.
"""

from capgeo_callbacks.callbacks import MeasureCallback, PrecursorDetector, RankMeMonitor
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
)
from capgeo_callbacks.layers import glob_match, resolve_layers
from capgeo_callbacks.measures.rankme import effective_rank, rankme

__all__ = [
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
    "glob_match",
    "layer_order",
    "precursor_verdict",
    "rankme",
    "resolve_layers",
]
