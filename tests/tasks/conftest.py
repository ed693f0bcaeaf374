"""Fixtures for the task tests."""

from __future__ import annotations

import pytest

from tests.tasks.helpers import LEVELS


@pytest.fixture(params=LEVELS, ids=[f"{t}-{d}" for t, d in LEVELS])
def level(request: pytest.FixtureRequest) -> tuple[str, str]:
    """Every (task, difficulty) pair."""
    return request.param
