"""``python -m capgeo_callbacks.scoring``: see :mod:`capgeo_callbacks.scoring.scores`."""

from capgeo_callbacks.scoring.scores import main

main()
