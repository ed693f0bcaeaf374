"""The study's phases: the runs it makes through the launcher (``launch``), each resumable, each exported to
``corpus/``."""
