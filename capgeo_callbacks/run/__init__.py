"""One run: the run session the adapters feed (:mod:`~capgeo_callbacks.run.session`), its tracker of evaluations
and rules, the summary it writes once, the evaluation schedule, reading finished runs from disk, and the failure
rule (bad input raises, later failures are reported once)."""
