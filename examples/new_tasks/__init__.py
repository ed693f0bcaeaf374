"""New task families for a test of capgeo's warning and forecast on tasks nobody calibrated (issue 29).

``tasks.py``: the families (LightningDataModules); ``model.py``: the decoder-only transformer that learns them;
``run.py``: one family at one seed with the README's callbacks; ``PILOTS.md``: the pilot seeds and what they
showed (pilot seeds are never reported as results).
"""
