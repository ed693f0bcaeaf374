"""The study: capgeo's own experiments on its algorithmic tasks. It uses the library like any user would, runs from
the checkout (``python -m study.<group>.<module>``), and nothing beneath it (the library, ``tasks``, ``models``,
``train.py``, ``sweep.py``) imports it. Grouped by role:

- :mod:`study.phases`: the runs the study makes through the launcher (the corpus, calibration, the warm-up ablation,
  the held-out test, the new task families, batches for a GPU machine);
- :mod:`study.registrations`: what is chosen and frozen before it is tested (the warning and forecaster,
  ``study/registration.json``) and the policy that holds runs to a registration committed before them;
- :mod:`study.record`: the pages and generated passages of README.md and docs/, read from the committed corpus.
"""
