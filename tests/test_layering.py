"""One direction between the packages (spec §2): the library imports none of the checkout's other packages,
and the study sits on top of everything (nothing it does not own imports it).

Static: an import in a subprocess cannot tell, since a name imported lazily inside a function only shows when
that function runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# never installed, never imported
CHECKOUT_ONLY = ("study", "tasks", "models", "train", "sweep", "launch", "benchmarks")
ENGINES = ("ray", "optuna", "submitit")  # the sweep extra: the library imports them only in the functions using them


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def imported(path: Path) -> Iterator[tuple[int, str]]:
    """Every absolute module name ``path`` imports, anywhere in it (functions included), with its line."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")):
            yield node.lineno, node.args[0].value


def named_defaults(path: Path) -> Iterator[tuple[int, str]]:
    """String defaults (function arguments, module constants) that are dotted paths: what a library resolves
    at run time without importing it."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        values: list[ast.expr] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            values = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node in tree.body and node.value is not None:
            values = [node.value]
        for value in values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str) and "." in value.value:
                yield value.lineno, value.value


def top(name: str) -> str:
    return name.split(".")[0].split(":")[0]


def test_there_are_modules_to_check() -> None:
    assert len(modules("capgeo_callbacks")) > 40 and modules("study") and modules("tasks") and modules("models")


@pytest.mark.parametrize("path", modules("capgeo_callbacks"), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_library_imports_nothing_of_the_checkout(path: Path) -> None:
    wrong = [(line, name) for line, name in imported(path) if top(name) in CHECKOUT_ONLY]
    assert not wrong, f"{path.relative_to(ROOT)} imports {wrong}: capgeo_callbacks must stand alone"
    named = [(line, value) for line, value in named_defaults(path) if top(value) in CHECKOUT_ONLY]
    assert not named, f"{path.relative_to(ROOT)} defaults to {named}: take it as an argument, or what the run records"


@pytest.mark.parametrize("path", modules("capgeo_callbacks"), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_library_imports_the_engines_only_where_they_run(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    top_level = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = [alias.name for node in top_level if isinstance(node, ast.Import) for alias in node.names]
    names += [node.module for node in top_level if isinstance(node, ast.ImportFrom) and node.module]
    wrong = [name for name in names if top(name) in ENGINES]
    assert not wrong, f"{path.relative_to(ROOT)} imports {wrong} at import time: capgeo_callbacks must not need them"


@pytest.mark.parametrize("package", ["tasks", "models"])
def test_tasks_and_models_never_import_the_study(package: str) -> None:
    for path in modules(package):
        wrong = [(line, name) for line, name in imported(path) if top(name) in ("study", "train", "sweep")]
        assert not wrong, f"{path.relative_to(ROOT)} imports {wrong}"


def test_no_library_module_is_over_450_lines() -> None:
    # a module a newcomer reads in one sitting; past this, a concept wants its own module
    long = {path.relative_to(ROOT).as_posix(): n for path in modules("capgeo_callbacks")
            if (n := len(path.read_text().splitlines())) > 450}
    assert not long, f"library modules over 450 lines: {long}"


def library(path: str) -> Path:
    return ROOT / "capgeo_callbacks" / path


def imports_of(paths: list[Path]) -> set[str]:
    return {name for path in paths for _, name in imported(path)}


def string_constants(path: Path) -> Iterator[str]:
    """Every string constant of a module's code (f-string parts included), docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value


def test_the_adapters_reach_the_session_not_each_other() -> None:
    """The Hugging Face callback and offline analysis feed the run session; neither imports the other or the
    Lightning glue."""
    hf = imports_of([library("integrations/hf.py"), library("integrations/hf_models.py")])
    assert "capgeo_callbacks.run.session" in hf
    assert not {n for n in hf if n.startswith(("capgeo_callbacks.offline", "capgeo_callbacks.callbacks"))}
    offline = imports_of(modules("capgeo_callbacks/offline"))
    assert "capgeo_callbacks.run.session" in offline
    # a Lightning checkpoint is validated with the live run's hidden-state monitors riding on the pass, as live
    monitors = {f"capgeo_callbacks.callbacks.{name}" for name in ("hidden_state_monitor", "rankme_monitor",
                                                                   "linear_probe_monitor")}
    assert not {n for n in offline if n.startswith(("capgeo_callbacks.callbacks", "capgeo_callbacks.integrations.hf"))
                and n != "capgeo_callbacks.integrations.hf_models" and n not in monitors}


def test_measures_take_tensors_and_callables_and_models_take_sizes() -> None:
    measures = imports_of(modules("capgeo_callbacks/measures"))
    assert {n for n in measures if n.startswith("capgeo_callbacks") and not n.startswith("capgeo_callbacks.measures")} \
        == set(), "the measures import only each other"
    assert not {n for n in imports_of(modules("models")) if top(n) == "tasks"}


def test_one_module_names_the_rankme_prefix_and_the_adapters_stay_thin() -> None:
    holders = sorted(path.relative_to(ROOT).as_posix() for path in modules("capgeo_callbacks")
                     if any("rankme/" in text for text in string_constants(path)))
    assert holders == ["capgeo_callbacks/keys.py"]
    for path, name in ((library("callbacks/precursor_detector.py"), "PrecursorDetector"),
                       (library("integrations/hf.py"), "CapgeoTrainerCallback")):
        [cls] = [node for node in ast.parse(path.read_text()).body
                 if isinstance(node, ast.ClassDef) and node.name == name]
        assert cls.end_lineno - cls.lineno + 1 <= 165, f"{name} is {cls.end_lineno - cls.lineno + 1} lines"
        text = path.read_text()
        assert not any("forecast/" in value for value in string_constants(path)), name  # the session publishes those
        assert "write_summary" not in text and "_warned" not in text, name
    every = "\n".join(path.read_text() for path in modules("capgeo_callbacks"))
    assert "_warned" not in every and every.count("class WarnOnce") == 1  # one warn-once, run/failures.py
    assert "write_summary(" not in (ROOT / "train.py").read_text()  # the session writes the summary, once
