"""Lightning callbacks: thin glue around the measures and detection."""

from capgeo_callbacks.callbacks.base import MeasureCallback
from capgeo_callbacks.callbacks.gradient_rank_monitor import (
    GradientMeasureCallback,
    GradientRankMonitor,
    answer_cross_entropy,
)
from capgeo_callbacks.callbacks.hessian_monitor import HessianMonitor
from capgeo_callbacks.callbacks.linear_probe_monitor import LinearProbeMonitor
from capgeo_callbacks.callbacks.llc_monitor import LLCMonitor
from capgeo_callbacks.callbacks.precursor_detector import PrecursorDetector
from capgeo_callbacks.callbacks.rankme_monitor import RankMeMonitor

__all__ = [
    "GradientMeasureCallback",
    "GradientRankMonitor",
    "HessianMonitor",
    "LLCMonitor",
    "LinearProbeMonitor",
    "MeasureCallback",
    "PrecursorDetector",
    "RankMeMonitor",
    "answer_cross_entropy",
]
