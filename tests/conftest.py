"""Fixtures shared across the test folders."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest


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
