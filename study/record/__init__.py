"""The study's record: every page and generated passage of README.md and docs/, read from the committed corpus
(``python -m study.record.summary`` rewrites them all)."""
