"""A clean install (spec §2): the wheel holds the library, ``capgeo_callbacks``, and nothing of the checkout's
other packages (``tasks``, ``models``, ``study``), which run from the checkout only; with its licence, its version,
its type hints (``py.typed``), the ``capgeo`` command, and as runtime dependencies what the library imports."""

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
CHECKOUT_ONLY = ("tasks", "models", "study", "launch", "tests", "benchmarks", "train.py", "sweep.py")
IMPORT_NAMES = {"scikit_learn": "sklearn", "pyyaml": "yaml"}  # distribution -> import name, where they differ
SERVED = {"tensorboard"}  # not imported: Lightning's default logger writes for it and `capgeo dashboard` runs it
NOT_FEATURES = ("dev", "docs")  # extras that add no feature of the library


def test_the_wheel_installs_the_library_only(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    # built from a copy: a build in the checkout would leave build/ and egg-info behind
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "train.py", "sweep.py"):
        shutil.copy(ROOT / name, source / name)
    for name in ("capgeo_callbacks", "tasks", "models", "study", "launch", "benchmarks"):
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
    assert imported - required <= extras, f"imported but neither required nor in an extra: {imported - required}"
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
