r"""Offline analysis
================

Per-layer RankMe, probes and the run's rules over the saved revisions of a model, through the same run
session as the live callbacks::

    python -m capgeo_callbacks.offline runs/mod-hard-xs-s0/version_0
    python -m capgeo_callbacks.offline pythia-70m/ --probe-file rows.pt --selector last

One module a job: :mod:`~capgeo_callbacks.offline.revisions` (finding, ordering and hashing revisions),
:mod:`~capgeo_callbacks.offline.recorded` (what a run recorded: class, monitors, the run session, datamodule),
:mod:`~capgeo_callbacks.offline.probe_sets` (the fixed probe rows), :mod:`~capgeo_callbacks.offline.measure_lightning`
(measuring one checkpoint; Hugging Face revisions: :mod:`capgeo_callbacks.integrations.hf_models`),
:mod:`~capgeo_callbacks.offline.analysis` (feeding the run session), :mod:`~capgeo_callbacks.offline.report_text`
and :mod:`~capgeo_callbacks.offline.cli`.
"""

from capgeo_callbacks.offline.analysis import analyze
from capgeo_callbacks.offline.cli import main
from capgeo_callbacks.offline.dotted import resolve_dotted
from capgeo_callbacks.offline.report_text import format_report
from capgeo_callbacks.offline.revisions import Revision, find_revisions, weights_sha256

__all__ = [
    "Revision",
    "analyze",
    "find_revisions",
    "format_report",
    "main",
    "resolve_dotted",
    "weights_sha256",
]
