"""What a warning or a forecast is worth, on any folder of runs: ``python -m capgeo_callbacks.scoring RUNS``
(:mod:`capgeo_callbacks.scoring.scores`; who will learn: :mod:`capgeo_callbacks.scoring.discrimination`; whether one
probability beats another on the same runs: :mod:`capgeo_callbacks.scoring.paired`)."""

from capgeo_callbacks.scoring.discrimination import (
    LEGEND,
    SHARES,
    Auroc,
    auroc,
    discrimination,
    discrimination_table,
)
from capgeo_callbacks.scoring.paired import Difference, paired_difference
from capgeo_callbacks.scoring.scores import (
    FRACTIONS,
    Rate,
    ScoredRun,
    distinct,
    first_alert,
    forecast_scores,
    forecast_table,
    load_runs,
    main,
    same_run,
    warning_scores,
    warning_table,
)

__all__ = [
    "FRACTIONS",
    "LEGEND",
    "SHARES",
    "Auroc",
    "Difference",
    "Rate",
    "ScoredRun",
    "auroc",
    "discrimination",
    "discrimination_table",
    "distinct",
    "first_alert",
    "forecast_scores",
    "forecast_table",
    "load_runs",
    "main",
    "paired_difference",
    "same_run",
    "warning_scores",
    "warning_table",
]
