"""Shared set-up of the study's tests."""

from __future__ import annotations

import subprocess
from pathlib import Path


def repo_with_registration(root: Path, name: str, text: str) -> tuple[Path, str, str]:
    """A git repository at ``root`` with a first commit, then ``name`` (holding ``text``) committed after it:
    (the registration's path, the commit before it, the commit that adds it)."""
    root.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    (root / "a.txt").write_text("before")
    git("add", "a.txt")
    git("commit", "-qm", "before")
    before = git("rev-parse", "HEAD")
    path = root / name
    path.write_text(text)
    git("add", name)
    git("commit", "-qm", "register")
    return path, before, git("rev-parse", "HEAD")
