"""What a warning or a forecast is worth, on any folder of runs: ``python -m capgeo_callbacks.scoring RUNS``
(:mod:`capgeo_callbacks.scoring.scores`)."""

from capgeo_callbacks.scoring.scores import (
    FRACTIONS,
    Rate,
    ScoredRun,
    first_alert,
    forecast_scores,
    forecast_table,
    load_runs,
    main,
    warning_scores,
    warning_table,
)

__all__ = [
    "FRACTIONS",
    "Rate",
    "ScoredRun",
    "first_alert",
    "forecast_scores",
    "forecast_table",
    "load_runs",
    "main",
    "warning_scores",
    "warning_table",
]
