"""A clean install (spec §2): the wheel holds the library, ``capgeo_callbacks`` (its sweeps included), and nothing of
the checkout's other packages (``tasks``, ``models``, ``study``) or scripts (``train.py``, ``sweep.py``), which run
from the checkout only; with its licence, its version, its type hints (``py.typed``), the ``capgeo`` command, and as
runtime dependencies what the library imports. CI builds the sdist and wheel, checks them and installs the wheel in a
fresh environment (``.ci/run``, ``.ci/fresh_install.sh``)."""

from __future__ import annotations

import ast
import email
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import capgeo_callbacks

ROOT = Path(__file__).resolve().parents[1]
CHECKOUT_ONLY = ("tasks", "models", "study", "tests", "benchmarks", "examples", "train.py", "train_cli.py", "sweep.py")
IMPORT_NAMES = {"scikit_learn": "sklearn", "pyyaml": "yaml"}  # distribution -> import name, where they differ
SERVED = {"tensorboard"}  # not imported: Lightning's default logger writes for it and `capgeo dashboard` runs it
NOT_FEATURES = ("dev", "docs")  # extras that add no feature of the library
# imported only where the user's own transformers integration for them runs, which imported them first
USERS_LOGGERS = {"mlflow", "wandb"}


@pytest.mark.slow
def test_the_wheel_installs_the_library_only(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    # built from a copy: a build in the checkout would leave build/ and egg-info behind
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "train.py", "train_cli.py", "sweep.py"):
        shutil.copy(ROOT / name, source / name)
    for name in ("capgeo_callbacks", "tasks", "models", "study", "examples", "benchmarks"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                           "-q", "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    [wheel] = (tmp_path / "dist").glob("capgeo_callbacks-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert "capgeo_callbacks/__init__.py" in names and "capgeo_callbacks/run/reading.py" in names
    assert "capgeo_callbacks/offline/__main__.py" in names  # subpackages too
    assert {f"capgeo_callbacks/sweeps/{name}.py" for name in ("__init__", "cli", "engines", "functions", "trials")} \
        <= set(names)  # the launcher, behind the sweep extra
    assert not top & set(CHECKOUT_ONLY), sorted(top)
    info = next(t for t in top if t.endswith(".dist-info"))
    assert top - {"capgeo_callbacks"} == {info}
    assert "capgeo_callbacks/py.typed" in names  # PEP 561: the type hints reach the wheel's users
    wheel_zip = zipfile.ZipFile(wheel)
    metadata = email.message_from_string(wheel_zip.read(f"{info}/METADATA").decode())
    assert metadata["Version"] == capgeo_callbacks.__version__  # one version, written once
    assert metadata["License-Expression"] == "Apache-2.0"
    assert f"{info}/licenses/LICENSE" in names
    assert "Apache License" in wheel_zip.read(f"{info}/licenses/LICENSE").decode()
    assert "capgeo = capgeo_callbacks.cli:main" in wheel_zip.read(f"{info}/entry_points.txt").decode()
    # the package's files that are not Python all reach the wheel (py.typed is the only one today)
    data = {path.relative_to(ROOT).as_posix() for path in (ROOT / "capgeo_callbacks").rglob("*")
            if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts}
    assert data <= set(names), sorted(data - set(names))
    extras = metadata.get_all("Provides-Extra")
    assert "sweep" in extras and any(dep.startswith("ray[tune]") and 'extra == "sweep"' in dep
                                     for dep in metadata.get_all("Requires-Dist"))


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _names(dependencies: list[str]) -> set[str]:
    """Import names of distributions given as requirement strings (``lightning>=2.4,<3`` -> ``lightning``)."""
    names = {re.split(r"[<>=!~\[; ]", dep)[0].replace("-", "_").lower() for dep in dependencies}
    return {IMPORT_NAMES.get(name, name) for name in names}


def _third_party_imports() -> set[str]:
    """The top-level names of every module the library imports, anywhere (functions included), beside its own and
    the standard library's."""
    names = set()
    for path in (ROOT / "capgeo_callbacks").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"capgeo_callbacks", "__future__"}


def test_the_runtime_dependencies_are_what_the_library_imports() -> None:
    project = _pyproject()["project"]
    imported, required = _third_party_imports(), _names(project["dependencies"])
    extras = _names([dep for name, deps in project["optional-dependencies"].items() if name not in NOT_FEATURES
                     for dep in deps])
    assert required - SERVED <= imported, f"dependencies the library never imports: {required - SERVED - imported}"
    # the rest, imported only inside the functions that use them (the integrations, the scorer's extras), each in
    # the extra of its feature
    assert imported - required - USERS_LOGGERS <= extras, \
        f"imported but neither required nor in an extra: {imported - required - USERS_LOGGERS - extras}"
    assert "torchmetrics" not in required  # the checkout's models use it, not the library


def test_the_license_and_version_are_declared() -> None:
    pyproject = _pyproject()
    assert pyproject["project"]["license"] == "Apache-2.0"
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "capgeo_callbacks.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", capgeo_callbacks.__version__)
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog and f"## [{capgeo_callbacks.__version__}]" in changelog


def test_ci_builds_checks_and_installs_the_wheel() -> None:
    """The sdist and wheel are built and checked, and the fresh-install step installs the built wheel (not the clone)
    and sweeps a user's function with ``capgeo sweep`` on a local Ray."""
    run = (ROOT / ".ci" / "run").read_text()
    assert "python -m build" in run and "twine check" in run and ".ci/fresh_install.sh dist/" in run
    fresh = (ROOT / ".ci" / "fresh_install.sh").read_text()
    assert re.search(r'"\$wheel\[[\w,]*sweep[\w,]*\]"', fresh)  # the wheel with the sweep extra
    assert "capgeo sweep --help" in fresh and "capgeo sweep user_sweep:train" in fresh
    assert "git clone" not in fresh and '"$work/capgeo' not in fresh  # nothing installed from the checkout
    dev = _pyproject()["project"]["optional-dependencies"]["dev"]
    assert {_names([dep]).pop() for dep in dev} >= {"build", "twine"}


def test_ci_tests_the_oldest_frameworks_allowed() -> None:
    """CI runs the code meeting Lightning and transformers on the lower bounds pyproject.toml states, so a bound rises
    only with what is tested there."""
    assert ".ci/oldest.sh" in (ROOT / ".ci" / "run").read_text()
    oldest = (ROOT / ".ci" / "oldest.sh").read_text()
    project = _pyproject()["project"]
    for name, dependencies in (("lightning", project["dependencies"]), ("transformers",
                                                                      project["optional-dependencies"]["hf"])):
        [bound] = [re.search(r">=([\d.]+)", dep).group(1) for dep in dependencies if _names([dep]) == {name}]
        assert f'"{name}=={bound}.*"' in oldest, f"{name}: pyproject.toml allows {bound}, .ci/oldest.sh tests another"
    assert "tests/integrations/test_compat.py" in oldest
