"""The checkout the study runs from: its root, where its committed runs are, and the study's rule that a registered
or calibration run names committed code (the package's launcher records a commit where there is one, and asks nothing
more)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from capgeo_callbacks.sweeps import source_provenance

__all__ = ["CORPUS", "FORMER_CORPUS", "ROOT", "corpus_path", "history_paths", "require_clean_tree"]

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "study" / "corpus"  # the committed runs' summaries, one folder a phase
FORMER_CORPUS = "corpus"  # where they were committed first: registrations and older pages name them there


def corpus_path(written: str | Path) -> Path:
    """Where a path to committed runs, as a registration or an older page wrote it (``corpus/hard/...``, relative to
    the checkout), is now. Registrations are never edited: the paths written in them stay as history and are read
    through this one mapping."""
    parts = Path(written).parts
    if parts and parts[0] == FORMER_CORPUS:
        return CORPUS.joinpath(*parts[1:])
    return ROOT / written


def history_paths(path: Path) -> list[str]:
    """``path`` relative to the checkout, and, under :data:`CORPUS`, where it was before the move too: what git's
    history of committed runs is asked about (a file's first commit is under its former path)."""
    relative = Path(path).resolve().relative_to(ROOT)
    found = [relative.as_posix()]
    if Path(path).resolve().is_relative_to(CORPUS):
        found.append(Path(FORMER_CORPUS, Path(path).resolve().relative_to(CORPUS)).as_posix())
    return found


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
