"""``python -m capgeo_callbacks.report RUNS_DIR``."""

from capgeo_callbacks.report.render import main

main()
