"""Sweep report: the study's tables and plots from a folder of finished runs (``python -m study.record.report``).

The runs are read by :func:`capgeo_callbacks.run.reading.find_runs`; a run's row and the precursor rates
(:mod:`.rows`), comparing RankMe curves across sizes (:mod:`.curves`), rendering Markdown,
CSV and figures, and the command line (:mod:`.render`). It reads summaries only, never the model packages.
"""

from capgeo_callbacks.keys import layer_names
from capgeo_callbacks.publish.figures import plot_grid, plot_run
from capgeo_callbacks.run.reading import RunRecord, find_runs
from study.record.report.curves import curve_correlation, rankme_curve, size_correlations
from study.record.report.render import build_report, fmt, main, render_markdown, write_csv
from study.record.report.rows import precursor_rates, run_row

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
