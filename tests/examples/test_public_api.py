"""The examples are users' code: they import capgeo's public names only (the package's ``__all__``,
``capgeo_callbacks.integrations.hf`` and ``capgeo_callbacks.rules``) and nothing of the project's own experiments."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tests.examples.helpers import EXAMPLES

PUBLIC = ("capgeo_callbacks", "capgeo_callbacks.integrations.hf", "capgeo_callbacks.rules")
PROJECT = ("tasks", "models", "study", "train", "sweep", "benchmarks")


def imports(path: Path) -> list[tuple[str, list[str]]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


@pytest.mark.parametrize("path", sorted(EXAMPLES.rglob("*.py")), ids=lambda p: p.relative_to(EXAMPLES).as_posix())
def test_an_example_imports_only_public_names(path: Path) -> None:
    for module, names in imports(path):
        assert module.split(".")[0] not in PROJECT, f"{path.name} imports {module}"
        if module.split(".")[0] == "capgeo_callbacks":
            assert module in PUBLIC, f"{path.name} imports {module}; public: {', '.join(PUBLIC)}"
            exported = getattr(importlib.import_module(module), "__all__", None)
            if exported is not None:
                assert set(names) <= set(exported), f"{path.name}: {sorted(set(names) - set(exported))} not in {module}"
