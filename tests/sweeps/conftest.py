"""One local Ray for the launcher's tests (started at the first test that asks, shut down after the folder's last)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from capgeo_callbacks.sweeps.engines import start_ray


@pytest.fixture(scope="package")
def local_ray() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    start_ray(cpus=2)
    yield
    ray.shutdown()
