"""Lightning callbacks: thin glue around the measures and detection."""

from capgeo_callbacks.callbacks.base import MeasureCallback
from capgeo_callbacks.callbacks.precursor_detector import PrecursorDetector
from capgeo_callbacks.callbacks.rankme_monitor import RankMeMonitor

__all__ = ["MeasureCallback", "PrecursorDetector", "RankMeMonitor"]
