"""Fixtures shared across the test folders, and the hooks that run the suite on pytest-xdist workers (tests/workers.py
says how)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.workers import GroupScheduling, group_of, start_order, xdist_workers


def pytest_configure(config: pytest.Config) -> None:
    # the workers share the cores: each takes its share of threads (torch reads OMP_NUM_THREADS when imported, and the
    # subprocesses a test starts inherit it); a value the caller set is kept
    if xdist_workers() > 1 and "OMP_NUM_THREADS" not in os.environ:
        threads = max(1, (os.cpu_count() or 1) // xdist_workers())
        os.environ["OMP_NUM_THREADS"] = str(threads)
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(threads)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "local_ray" in getattr(item, "fixturenames", ()) and group_of(item.nodeid) != "ray":
            raise pytest.UsageError(f"{item.nodeid} uses local_ray: name it in the ray group (tests/workers.py)")
    if xdist_workers() > 1:  # every worker collects, and sorts the same way; a run in one process keeps file order
        items.sort(key=start_order)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The groups of tests/workers.py, in place of pytest-xdist's default (``--dist load``); another ``--dist`` is
    kept."""
    return GroupScheduling(config, log) if config.getvalue("dist") == "load" else None


@pytest.fixture(scope="session")
def local_ray() -> Iterator[None]:
    """One local Ray for the tests that launch on it (started at the first that asks, shut down at the end); under
    pytest-xdist those tests share one worker (the ``ray`` group of tests/workers.py), so one Ray runs at a time."""
    ray = pytest.importorskip("ray")
    from capgeo_callbacks.sweeps.engines import start_ray

    start_ray(cpus=2)
    yield
    ray.shutdown()


@pytest.fixture
def offline_loggers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """W&B offline into the test's folder, MLflow's file store allowed; a W&B run left open is finished."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps the file store only on request
    yield
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish()
