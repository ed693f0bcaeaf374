"""The study: capgeo's own experiments on its algorithmic tasks (calibration, the labelled corpus, the warm-up
ablation, the claims and the held-out test of the warning). It uses the library like any user would and runs
from the checkout (``python -m study.<module>``); ``capgeo_callbacks`` never imports it."""
