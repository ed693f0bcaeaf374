"""How the suite runs on pytest-xdist workers (the README's command says ``-n auto``).

Some tests must share a worker: those of a group run on the same worker, one after another. The groups (``GROUPS``):
``record`` (the study's record, regenerated once), ``ray`` (the tests that launch on the ``local_ray`` fixture's
local Ray: one Ray, never two clusters on the same cores), ``ddp`` (the runs that start DDP process pairs of their own:
one pair at a time), ``offline`` (the trained run and the revisions its session fixtures make once), and each module of
tests/examples/ (its trained run, a module fixture, made once). The groups go to the workers first, then the ``slow``
tests, so that no worker is left with a long test at the end while the other idles; the short tests fill the gaps.

pytest-xdist's own ``--dist loadgroup`` reads ``xdist_group`` marks from rewritten node ids, which pytest 9.2 no longer
carries (pytest-dev/pytest-xdist#1386): a group passed that way is silently split. So the groups are named here by
node id, the one thing the controller sees, and :class:`GroupScheduling` keeps each on one worker.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from typing import TypeVar

import pytest
from xdist.scheduler import LoadScopeScheduling

T = TypeVar("T")

# each group's tests by node id prefix, in the order the groups start: the record's regeneration is the longest
GROUPS: dict[str, tuple[str, ...]] = {
    "record": ("tests/study/test_record.py::",),
    "ray": ("tests/sweeps/test_launch.py::test_a_grid_runs_on_a_local_ray_",
            "tests/sweeps/test_launch.py::test_a_killed_trial_resumes_and_a_crashing_one_fails_alone",
            "tests/sweeps/test_functions.py::test_a_grid_of_a_function_runs_on_a_local_ray_",
            "tests/sweeps/test_functions.py::test_a_killed_function_trial_resumes_at_its_checkpoint",
            "tests/sweeps/test_cli.py::test_a_tiny_function_is_swept_on_a_local_ray_",
            "tests/test_sweep.py::test_real_run_is_started_resumed_and_skipped",
            "tests/study/test_report.py::test_sweep_then_report_end_to_end"),
    "ddp": ("tests/callbacks/test_ddp.py::", "tests/callbacks/test_compatibility.py::test_ddp_on_cpu",
            "tests/callbacks/test_gradient_rank_monitor.py::test_under_ddp_"),
    "offline": ("tests/offline/",),
}
EXAMPLES = "tests/examples/"


def group_of(nodeid: str) -> str | None:
    """The group of the test ``nodeid``, or None: it may run on any worker."""
    for name, prefixes in GROUPS.items():
        if nodeid.startswith(prefixes):
            return name
    if nodeid.startswith(EXAMPLES):
        return nodeid.partition("::")[0]
    return None


def start_order(item: pytest.Item) -> int:
    """When ``item`` is sent to a worker: the groups in ``GROUPS``' order, the example modules, the slow tests, the
    rest (a stable sort keeps the files' order within each)."""
    group = group_of(item.nodeid)
    if group is not None:
        return list(GROUPS).index(group) if group in GROUPS else len(GROUPS)
    return len(GROUPS) + (1 if item.get_closest_marker("slow") else 2)


class GroupScheduling(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with ``group_of``'s groups as the scopes, every other test a scope of its own,
    sent in the order the workers collected them (``start_order``)."""

    def __init__(self, config: pytest.Config, log: object = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False  # keep start_order's order, not scopes by size

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid) or nodeid


def xdist_workers() -> int:
    """How many pytest-xdist workers share the machine (1 when the suite runs in one process)."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def computed_once(tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[], T]) -> T:
    """``compute()`` once per run of the suite, whichever worker asks first: the others wait for it and read its
    pickle, kept in the run's own temporary folder (shared by its workers, never by two runs) under a file lock,
    as pytest-xdist documents. In one process, simply ``compute()``."""
    if xdist_workers() == 1:
        return compute()
    from filelock import FileLock

    path = tmp_path_factory.getbasetemp().parent / f"{name}.pickle"
    with FileLock(f"{path}.lock"):
        if path.is_file():
            return pickle.loads(path.read_bytes())
        value = compute()
        path.write_bytes(pickle.dumps(value))
        return value
