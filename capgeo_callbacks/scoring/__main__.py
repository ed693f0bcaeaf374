"""``python -m capgeo_callbacks.scoring``: ``capgeo score`` (:mod:`capgeo_callbacks.scoring.command`)."""

from capgeo_callbacks.scoring.command import main

main()
