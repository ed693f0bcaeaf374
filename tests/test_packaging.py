"""A clean install (spec §2): the wheel holds the library, ``capgeo_callbacks``, and nothing of the checkout's
other packages (``tasks``, ``models``, ``study``), which run from the checkout only."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKOUT_ONLY = ("tasks", "models", "study", "launch", "tests", "benchmarks", "train.py", "sweep.py")


def test_the_wheel_installs_the_library_only(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    # built from a copy: a build in the checkout would leave build/ and egg-info behind
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "train.py", "sweep.py"):
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
    assert top - {"capgeo_callbacks"} == {next(t for t in top if t.endswith(".dist-info"))}
