"""The twins' cells and folders, shared by the pilots (:mod:`study.phases.twins`), the registered phases
(:mod:`study.phases.twins_registered`) and the analysis (:mod:`study.phases.twins_analysis`): a cell's name from its
settings, the family its name says, and where twins run and are exported."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from study.checkout import ROOT
from study.phases.corpus import CORPUS

FOLDER = CORPUS / "twins"  # exported summaries: study/corpus/twins/<phase>/<twin>.json.gz
RUNS = ROOT / "runs" / "twins"  # run folders: runs/twins/<phase>/<twin>/


def cell_name(settings: Mapping[str, Any]) -> str:
    """``sort-medium-b450`` (a train.py task, difficulty and budget) or ``grok-add-f0.45-wd1`` (a grokking
    operation, training fraction and weight decay)."""
    if "operation" in settings:
        return f"grok-{settings['operation']}-f{settings['fraction']:g}-wd{settings['weight_decay']:g}"
    return f"{settings['task']}-{settings['difficulty']}-b{settings['max_steps']}"


def family(cell: str) -> str:
    """``grokking`` for a ``grok-...`` cell, else ``tasks`` (capgeo's tasks)."""
    return "grokking" if str(cell).startswith("grok-") else "tasks"
