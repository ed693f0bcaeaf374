"""``python -m study.record.report RUNS_DIR``."""

from study.record.report.render import main

main()
