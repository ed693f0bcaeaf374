"""Examples of capgeo on models and tasks it was not built on (README, "On your own model").

Each gallery script (``examples/*.py``) runs on its own: ``python examples/<name>.py``. ``examples.new_tasks``
holds new task families for the test of the warning and the forecast on tasks nobody calibrated (issue 29).
"""
