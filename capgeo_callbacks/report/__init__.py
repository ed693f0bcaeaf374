"""Sweep report: the study's tables and plots from a folder of finished runs (``python -m capgeo_callbacks.report``).

Reading the runs (:mod:`.runs`), comparing RankMe curves across sizes (:mod:`.curves`), rendering Markdown,
CSV and figures, and the command line (:mod:`.render`). It reads summaries only, never the model packages.
"""

from capgeo_callbacks.figures import plot_grid, plot_run
from capgeo_callbacks.report.curves import curve_correlation, rankme_curve, size_correlations
from capgeo_callbacks.report.render import build_report, fmt, main, render_markdown, write_csv
from capgeo_callbacks.report.runs import RunRecord, find_runs, precursor_rates, run_row
from capgeo_callbacks.summary import layer_names

__all__ = [
    "RunRecord",
    "build_report",
    "curve_correlation",
    "find_runs",
    "fmt",
    "layer_names",
    "main",
    "plot_grid",
    "plot_run",
    "precursor_rates",
    "rankme_curve",
    "render_markdown",
    "run_row",
    "size_correlations",
    "write_csv",
]
