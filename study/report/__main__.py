"""``python -m study.report RUNS_DIR``."""

from study.report.render import main

main()
