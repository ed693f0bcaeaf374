"""Dotted paths resolved at run time (how the library reaches a user's classes without importing them), and
transformers imported only lazily."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from capgeo_callbacks.offline import main, resolve_dotted

ROOT = Path(__file__).resolve().parents[2]


def test_resolve_dotted() -> None:
    assert resolve_dotted("capgeo_callbacks.detection.layer_order").__name__ == "layer_order"
    assert resolve_dotted("capgeo_callbacks.offline:main") is main
    with pytest.raises(ValueError, match="has no attribute 'Nope'"):
        resolve_dotted("capgeo_callbacks.Nope")
    with pytest.raises(ValueError, match="cannot import"):
        resolve_dotted("no_such_package_xyz.Thing")
    with pytest.raises(ValueError, match="not a dotted path"):
        resolve_dotted(":Thing")


def test_transformers_is_imported_only_lazily() -> None:
    # static check: an import test in a subprocess cannot tell, since torchmetrics (under Lightning) imports
    # transformers itself whenever it is installed (tasks, models and the study: tests/test_layering.py)
    for path in (ROOT / "capgeo_callbacks").rglob("*.py"):
        tree = ast.parse(path.read_text())
        top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        for node in top_level:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            assert not any(n.split(".")[0] == "transformers" for n in names), (path, names)
