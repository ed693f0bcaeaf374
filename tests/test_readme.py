"""The README a newcomer reads in five minutes: at most 150 lines, every link it makes leads to a file, and every
module its commands run exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_readme_fits_in_150_lines() -> None:
    assert len(README.splitlines()) <= 150


def test_every_relative_link_leads_to_a_file() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)", README)
    local = [target for target in targets if "://" not in target]
    assert local, "the README links nothing"
    missing = [target for target in local if not (ROOT / target).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_every_module_the_readme_runs_exists() -> None:
    modules = set(re.findall(r"python -m ([\w.]+)", README)) - {"pytest"}
    assert modules
    missing = [name for name in sorted(modules) if importlib.util.find_spec(name) is None]
    assert not missing, f"README runs modules that do not exist: {missing}"


def test_no_placeholder_is_left() -> None:
    assert not re.search(r"\b(TODO|TBD|XXX|[A-Z]+_(TABLE|N))\b", README)
