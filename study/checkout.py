"""The checkout the study runs from: its root, and the study's rule that a registered or calibration run names
committed code (the package's launcher records a commit where there is one, and asks nothing more)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from capgeo_callbacks.sweeps import source_provenance

__all__ = ["ROOT", "require_clean_tree"]

ROOT = Path(__file__).resolve().parents[1]


def require_clean_tree(what: str, root: Path = ROOT) -> str:
    """The commit of ``root``, or exit when its tracked files have uncommitted changes: a registered or calibration
    run must name the code it ran."""
    found = source_provenance(root)
    if not found:
        raise SystemExit(f"{what} needs a git checkout to record its commit ({root} has none)")
    if found["CAPGEO_TREE_CLEAN"] != "1":
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, check=False, timeout=30).stdout.strip()
        raise SystemExit(f"{what} refuses a tree with uncommitted changes (commit them, or run from a clean "
                         f"worktree):\n{status}")
    return found["CAPGEO_COMMIT"]
