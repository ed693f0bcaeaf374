"""One run's record: the tracker of its evaluations and rules, the summary it leaves behind, the evaluation
schedule, reading finished runs from disk, and the failure rule (bad input raises, later failures are reported
once)."""
