"""What a warning or a forecast is worth, on any folder of runs: ``capgeo score RUNS``
(:mod:`capgeo_callbacks.scoring.scores`; who will learn: :mod:`capgeo_callbacks.scoring.discrimination`; whether one
probability beats another on the same runs: :mod:`capgeo_callbacks.scoring.paired`; every rule's lead at a capped
false-alarm rate, its settings chosen on calibration runs: :mod:`capgeo_callbacks.scoring.leads`)."""

from capgeo_callbacks.scoring.command import main
from capgeo_callbacks.scoring.discrimination import (
    LEGEND,
    SHARES,
    Auroc,
    auroc,
    discrimination,
    discrimination_table,
)
from capgeo_callbacks.scoring.leads import GRIDS, RuleGrid, RuleLead, leads_table, rule_leads
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
    same_run,
    warning_scores,
    warning_table,
)

__all__ = [
    "FRACTIONS",
    "GRIDS",
    "LEGEND",
    "SHARES",
    "Auroc",
    "Difference",
    "Rate",
    "RuleGrid",
    "RuleLead",
    "ScoredRun",
    "auroc",
    "discrimination",
    "discrimination_table",
    "distinct",
    "first_alert",
    "forecast_scores",
    "forecast_table",
    "leads_table",
    "load_runs",
    "main",
    "paired_difference",
    "rule_leads",
    "same_run",
    "warning_scores",
    "warning_table",
]
