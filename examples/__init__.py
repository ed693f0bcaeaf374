"""Examples of capgeo on models and tasks it was not built on (README, "On your own model").

Each gallery script (``examples/*.py``) runs on its own: ``python examples/<name>.py``, or ``python -m
examples.<name>`` for those that import the gallery's Llama-like decoder (``examples/decoder.py``: ``own_model.py``
and ``examples.new_tasks``, which holds new task families for the test of the warning and the forecast on tasks nobody
calibrated).
"""
