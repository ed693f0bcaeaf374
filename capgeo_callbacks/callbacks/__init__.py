"""Lightning callbacks: thin glue around the measures and detection (one callback a file)."""

from capgeo_callbacks.callbacks.base import GradientMeasureCallback, MeasureCallback
from capgeo_callbacks.callbacks.commutator_monitor import CommutatorDefectMonitor
from capgeo_callbacks.callbacks.evaluation_schedule import EvaluationSchedule
from capgeo_callbacks.callbacks.gradient_rank_monitor import GradientRankMonitor
from capgeo_callbacks.callbacks.hessian_monitor import HessianMonitor
from capgeo_callbacks.callbacks.linear_probe_monitor import LinearProbeMonitor
from capgeo_callbacks.callbacks.llc_monitor import LLCMonitor
from capgeo_callbacks.callbacks.precursor_detector import PrecursorDetector
from capgeo_callbacks.callbacks.rankme_monitor import RankMeMonitor
from capgeo_callbacks.callbacks.step_progress_bar import StepProgressBar
from capgeo_callbacks.callbacks.weight_norm_monitor import WeightNormMonitor
from capgeo_callbacks.run.failures import never_fails

__all__ = [
    "CommutatorDefectMonitor",
    "EvaluationSchedule",
    "GradientMeasureCallback",
    "GradientRankMonitor",
    "HessianMonitor",
    "LLCMonitor",
    "LinearProbeMonitor",
    "MeasureCallback",
    "PrecursorDetector",
    "RankMeMonitor",
    "StepProgressBar",
    "WeightNormMonitor",
    "never_fails",
]
