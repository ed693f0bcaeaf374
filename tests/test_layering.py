"""One direction between the packages (spec §2): the library imports none of the checkout's other packages (its
launcher, ``capgeo_callbacks.sweeps``, runs the bench's train.py trials without knowing them); the bench (``tasks``,
``models``, ``train.py``, ``sweep.py``) sits on the library, and the study on top of everything (nothing it does not
own imports it); no import circle among the project's modules. Inside the library: ``publish`` is
a leaf, only the run package reaches the tracker, and only the measuring unit calls the hidden-state measures and the
label functions.

Static: an import in a subprocess cannot tell, since a name imported lazily inside a function only shows when
that function runs.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# never installed, never imported
CHECKOUT_ONLY = ("study", "tasks", "models", "train", "train_cli", "sweep", "benchmarks")
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
    """The Hugging Face callback feeds the run engine and offline analysis the run session; neither imports the other
    or the Lightning glue (the Hugging Face callback builds the registry's measures, as a Lightning Trainer gets
    them)."""
    hf = imports_of([library("integrations/hf.py"), library("integrations/hf_models.py")])
    assert {"capgeo_callbacks.engine.run", "capgeo_callbacks.registry"} <= hf
    assert not {n for n in hf if n.startswith(("capgeo_callbacks.offline", "capgeo_callbacks.callbacks"))}
    offline = imports_of(modules("capgeo_callbacks/offline"))
    assert "capgeo_callbacks.run.session" in offline
    # a Lightning checkpoint is validated with the live run's hidden-state monitors riding on the pass, as live
    monitors = {f"capgeo_callbacks.callbacks.{name}" for name in ("hidden_state_monitor", "rankme_monitor",
                                                                   "linear_probe_monitor")}
    assert not {n for n in offline if n.startswith(("capgeo_callbacks.callbacks", "capgeo_callbacks.integrations.hf"))
                and n != "capgeo_callbacks.integrations.hf_models" and n not in monitors}


ADAPTERS = {"callbacks/precursor_detector.py": "PrecursorDetector", "integrations/hf.py": "CapgeoTrainerCallback",
            "callbacks/base.py": "GradientMeasureCallback", "callbacks/llc_monitor.py": "LLCMonitor",
            "callbacks/hidden_state_monitor.py": "HiddenStateMonitor",
            "callbacks/capability_stopper.py": "CapabilityStopper",
            "callbacks/evaluation_schedule.py": "EvaluationSchedule"}


@pytest.mark.parametrize(("path", "name"), ADAPTERS.items())
def test_the_adapters_are_thin(path: str, name: str) -> None:
    """The run engine (capgeo_callbacks/engine/) holds what a run does; an adapter class is the glue to its framework's
    events, at most 130 lines, docstring included."""
    [cls] = [node for node in ast.parse(library(path).read_text()).body
             if isinstance(node, ast.ClassDef) and node.name == name]
    assert cls.end_lineno - cls.lineno + 1 <= 130, f"{name} is {cls.end_lineno - cls.lineno + 1} lines"


def test_no_capgeo_piece_searches_the_trainers_callbacks() -> None:
    """Values pass as Lightning's own callbacks pass them (``trainer.callback_metrics``) or are handed over; each
    capgeo callback joins its Trainer's record at ``setup`` (capgeo_callbacks/engine/joined.py), and nothing reads
    ``trainer.callbacks`` (train.py, the bench, hands its detector over too)."""
    def reads(path: Path) -> bool:
        return any(isinstance(node, ast.Attribute) and node.attr == "callbacks" and isinstance(node.value, ast.Name)
                   and node.value.id == "trainer" for node in ast.walk(ast.parse(path.read_text())))

    searching = [path.relative_to(ROOT).as_posix() for path in [*modules("capgeo_callbacks"), ROOT / "train.py"]
                 if reads(path)]
    assert searching == []


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
        text = path.read_text()
        assert not any("forecast/" in value for value in string_constants(path)), name  # the session publishes those
        assert "write_summary" not in text and "_warned" not in text, name
    every = "\n".join(path.read_text() for path in modules("capgeo_callbacks"))
    assert "_warned" not in every and every.count("class WarnOnce") == 1  # one warn-once, run/failures.py
    assert "write_summary(" not in (ROOT / "train.py").read_text()  # the session writes the summary, once


# -- the seams: the library's launcher beneath the bench, the bench beneath the study ---------------------------------
PROJECT = ("capgeo_callbacks", "tasks", "models", "study", "examples", "benchmarks")
SCRIPTS = ("train.py", "train_cli.py", "sweep.py")


def project_modules() -> dict[str, Path]:
    """Every module of the project (the tests aside) by its dotted name."""
    paths = [path for package in PROJECT for path in modules(package)] + [ROOT / script for script in SCRIPTS]
    named = {}
    for path in paths:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        named[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return named


def test_train_py_and_its_sweep_import_nothing_of_the_study() -> None:
    for path in [ROOT / script for script in SCRIPTS]:
        wrong = [(line, name) for line, name in imported(path) if top(name) == "study"]
        assert not wrong, f"{path.relative_to(ROOT)} imports {wrong}: the study sits above the main command"


def test_the_packaged_launcher_names_neither_the_bench_nor_the_study() -> None:
    """The launcher ships in the wheel: it runs a user's function or a project's own trials, and says nothing of
    capgeo's train.py, its sweep, the study or the study's rule on clean trees."""
    sweeps = modules("capgeo_callbacks/sweeps")
    assert {path.name for path in sweeps} >= {"__init__.py", "cli.py", "engines.py", "functions.py", "trials.py"}
    for path in sweeps:
        text = path.read_text()
        named = [word for word in ("train.py", "train_cli", "sweep.py", "study", "require_clean_tree") if word in text]
        assert not named, f"{path.relative_to(ROOT)} names {named}"
    assert not (ROOT / "launch").exists(), "the launcher is capgeo_callbacks.sweeps; launch/ is gone"


def test_the_bench_imports_train_py_only_to_run_it() -> None:
    """train.py's arguments are read by train_cli (its command line); train.py itself is imported only where a
    train.py trial runs (``sweep.TrainTrial.execute``)."""
    for path in [ROOT / "sweep.py"]:
        tree = ast.parse(path.read_text())
        owners = {id(method): cls.name for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef)
                  for method in cls.body}
        for function in [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.Module))]:
            body = function.body if isinstance(function, ast.FunctionDef) else [
                node for node in function.body if not isinstance(node, (ast.FunctionDef, ast.ClassDef))]
            names = {alias.name for node in body for inner in ast.walk(node) if isinstance(inner, ast.Import)
                     for alias in inner.names}
            if "train" in names:
                where = (owners.get(id(function)), getattr(function, "name", None))
                assert where == ("TrainTrial", "execute"), \
                    f"{path.relative_to(ROOT)} imports train.py in {'.'.join(filter(None, where)) or 'the module'}"


def test_the_study_imports_the_examples_it_runs_never_names_them() -> None:
    """An example the study trains with is imported (a renamed example breaks the study's import), never run by a
    dotted name the launcher resolves only when a run starts."""
    dotted = re.compile(r"^examples(\.\w+)+(:[\w.]+)?$")
    for path in modules("study"):
        named = [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Constant) and isinstance(node.value, str) and dotted.match(node.value)]
        assert not named, f"{path.relative_to(ROOT)} names examples by their path: {named}; import them"


def test_no_import_circle_among_the_project_s_modules() -> None:
    """Lazy imports (inside functions) included; a module importing from its own package's ``__init__`` is fine."""
    named = project_modules()

    def resolved(name: str) -> str | None:
        while name and name not in named:
            name = name.rpartition(".")[0]
        return name or None

    graph = {module: {found for _, name in imported(path) for candidate in (name,)
                      if (found := resolved(candidate)) is not None and found != module}
             for module, path in named.items()}
    for module, path in named.items():  # ``from package import module`` imports that module
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                graph[module] |= {f"{node.module}.{alias.name}" for alias in node.names
                                  if f"{node.module}.{alias.name}" in named} - {module}
    circles, done, stack = [], set(), []

    def visit(module: str) -> None:
        if module in stack:
            circles.append(stack[stack.index(module):] + [module])
            return
        if module in done:
            return
        stack.append(module)
        for other in sorted(graph[module]):
            visit(other)
        stack.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
    assert len(named) > 150 and not circles, f"import circles: {circles[:5]}"


def attribute_names(path: Path) -> set[str]:
    return {node.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute)}


def test_nothing_outside_the_run_package_reaches_the_tracker() -> None:
    """Whoever wants to know where a run stands reads the session's view (``run/view.py``)."""
    outside = [path for path in project_modules().values() if "run" not in path.relative_to(ROOT).parts[1:2]]
    outside += [path for path in sorted((ROOT / "tests").rglob("*.py")) if path.parent.name != "run"]
    reaching = [path.relative_to(ROOT).as_posix() for path in outside if "tracker" in attribute_names(path)]
    assert not reaching, f"{reaching} reach into the session's tracker"


def test_publish_imports_only_the_keys_of_the_package() -> None:
    for path in modules("capgeo_callbacks/publish"):
        wrong = {name for _, name in imported(path) if top(name) == "capgeo_callbacks"
                 and not name.startswith(("capgeo_callbacks.publish", "capgeo_callbacks.keys"))}
        assert not wrong, f"{path.relative_to(ROOT)} imports {wrong}: publish is a leaf"


def called_names(path: Path) -> set[str]:
    return {node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Name, ast.Attribute))}


def test_only_the_measuring_unit_measures_hidden_states_and_reads_labels() -> None:
    """RankMe, ILDR and the probe of a layer's rows, and the probe and ILDR labels of a batch, have one caller: the
    unit the Lightning monitors, the Hugging Face callback and offline analysis all drive."""
    measured = {"rankme", "ildr", "held_out_probe_accuracy", "answer_labels", "target_labels", "row_targets"}
    callers = {path.relative_to(ROOT).as_posix(): sorted(called_names(path) & measured)
               for path in modules("capgeo_callbacks") if called_names(path) & measured}
    assert callers == {"capgeo_callbacks/capture/unit.py": sorted(measured)}


# The layout the project ships: the library, its bench and tests at the top, docs, examples and benchmarks beside
# them, one study folder (its runs inside it), the bench's thin fronts, and the usual files.
TOP_LEVEL = {"pyproject.toml", "README.md", "capgeo_callbacks", "tasks", "models", "tests", "train.py", "docs",
             "examples", "benchmarks", "study", "train_cli.py", "sweep.py",
             "LICENSE", "CHANGELOG.md", "mkdocs.yml", ".gitignore", ".ci", ".github"}


def test_the_top_level_holds_only_what_ships() -> None:
    import subprocess

    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the tracked files cannot be told from build outputs")
    found = {Path(line).parts[0] for line in listed.stdout.splitlines() if line}
    assert "capgeo_callbacks" in found and "study" in found
    assert found <= TOP_LEVEL, f"at the top besides the project's layout: {sorted(found - TOP_LEVEL)}"
