r"""The overhead budget
===================

capgeo's own time held under a share of the run's, by construction (docs/design.md, "The overhead budget").

An :class:`OverheadBudget` is a pure controller (no framework in it; the clock is injectable): it is told what
capgeo's pieces of work are, which of them are protected (what the run's rules read: never thinned), times each
piece's work (:meth:`~OverheadBudget.timing`), and decides at each evaluation whether a piece that is due may run
(:meth:`~OverheadBudget.allows`). The run's own time is the time since :meth:`~OverheadBudget.start` less capgeo's
own: what the same run would take without capgeo (its training steps, its validation passes, its data loading), so
the share it keeps is the overhead that a run with capgeo against one without measures (their ratio less one).

The rule, over the run (not per evaluation):

- protected work always runs (the measures the run's rules read, the detector); so does every piece at the
  evaluations in the first ``protected_share`` of the run's steps (with capgeo's geometric schedule a quarter of the
  evaluations, with an even one a tenth), where capgeo's dense early measurements are;
- after that, the optional pieces (the rest: probes, extra RankMe monitors, the costly measures, live figures) share
  equally what the budget leaves once the protected work is paid for: a piece that is due runs if what it has spent,
  plus its mean cost so far, fits in its part, and is thinned otherwise (counted). A costly piece thus runs more
  rarely than a cheap one instead of being crowded out by it.

The setting (``overhead_budget``) is defined and validated here only (:func:`check_overhead_budget`); the Lightning
glue is :class:`~capgeo_callbacks.PrecursorDetector`, which hands its session's budget to the measure callbacks.

Example::

    budget = OverheadBudget(0.03, horizon=3000)
    budget.add_work("rankme", protected=True)
    budget.add_work("probe_acc")
    budget.start()
    ...
    if budget.allows("probe_acc", step):
        with budget.timing("probe_acc"):
            ...
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any

__all__ = ["DEFAULT_OVERHEAD_BUDGET", "PROTECTED_SHARE", "OverheadBudget", "WorkRecord", "check_overhead_budget",
           "steps_of"]

DEFAULT_OVERHEAD_BUDGET = 0.03  # capgeo's time at most 3% of the run's (docs/overhead.md)
PROTECTED_SHARE = 0.1  # evaluations in the first tenth of the run's steps are never thinned


def check_overhead_budget(value: Any) -> float | None:
    """The ``overhead_budget`` setting, checked: a share of the run's time in (0, 1), or None / 0 (off: capgeo
    times nothing and thins nothing). The one place it is validated.

    Raises:
        ValueError: on anything else (the message names the setting and its valid values).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value < 1:
        raise ValueError(f"overhead_budget must be a share of the run's time in (0, 1) (e.g. 0.03: capgeo's own work "
                         f"at most 3% of the run's), or None or 0 to switch it off; got {value!r}")
    return float(value) or None


def steps_of(*candidates: Any) -> int | None:
    """The first of ``candidates`` that is a finite positive number of steps (a callable is called only if reached),
    as an integer: a run's horizon from what its framework knows (None: no candidate is)."""
    for candidate in candidates:
        steps = candidate() if callable(candidate) else candidate
        if isinstance(steps, (int, float)) and not isinstance(steps, bool) and 0 < steps < math.inf:
            return int(steps)
    return None


@dataclass
class WorkRecord:
    """One piece of capgeo's work in the budget's record.

    Attributes:
        protected: never thinned (what the run's rules read, or the detector itself).
        seconds: capgeo's time spent on it (exclusive of nested pieces).
        due: evaluations at which it was due (its own cadence said so) and asked to run.
        runs: evaluations at which it ran.
        thinned: evaluations at which it was due and the budget left it out.
    """

    protected: bool = False
    seconds: float = 0.0
    due: int = 0
    runs: int = 0
    thinned: int = 0

    @property
    def mean_cost(self) -> float:
        """Its time per run so far (0 before it first ran)."""
        return self.seconds / self.runs if self.runs else 0.0


class _Timing:
    """Times one piece of work (exclusive of the pieces nested in it)."""

    __slots__ = ("budget", "name")

    def __init__(self, budget: OverheadBudget, name: str) -> None:
        self.budget, self.name = budget, name

    def __enter__(self) -> None:
        self.budget._open.append([self.budget.clock(), 0.0])

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        budget = self.budget
        started, nested = budget._open.pop()
        elapsed = budget.clock() - started
        budget.charge(self.name, elapsed - nested)
        if budget._open:
            budget._open[-1][1] += elapsed


class OverheadBudget:
    """Keeps capgeo's share of a run's time under ``share`` (module docstring).

    Args:
        share: the budget, a share of the run's time in (0, 1) (:func:`check_overhead_budget`).
        horizon: the run's steps (its budget); evaluations at steps up to ``protected_share * horizon`` are never
            thinned (None: none are, by position).
        clock: seconds, monotonic (default :func:`time.perf_counter`; tests inject their own).
        protected_share: the share of the run's steps at the start whose evaluations are never thinned.

    Raises:
        ValueError: on a bad argument (a share of None or 0 is no budget: build none).
    """

    def __init__(self, share: float, *, horizon: int | None = None, clock: Callable[[], float] = time.perf_counter,
                 protected_share: float = PROTECTED_SHARE) -> None:
        checked = check_overhead_budget(share)
        if checked is None:
            raise ValueError("an overhead budget of None or 0 is off: build no OverheadBudget")
        if not callable(clock):
            raise ValueError(f"clock must be callable () -> seconds, got {clock!r}")
        if isinstance(protected_share, bool) or not isinstance(protected_share, (int, float)) \
                or not 0 <= protected_share <= 1:
            raise ValueError(f"protected_share must be in [0, 1], got {protected_share!r}")
        self.share = checked
        self.horizon = horizon
        self.clock = clock
        self.protected_share = float(protected_share)
        self.work: dict[str, WorkRecord] = {}
        self._open: list[list[float]] = []  # per open timing: [start, time of the pieces nested in it]
        self._carried = 0.0  # the run's own time before this process started (a resumed run)
        self._started: float | None = None
        self._own_at_start = 0.0

    @property
    def horizon(self) -> int | None:
        return self._horizon

    @horizon.setter
    def horizon(self, value: int | None) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"horizon must be a positive number of steps or None, got {value!r}")
        self._horizon = value

    def add_work(self, name: str, protected: bool = False) -> None:
        """Declare a piece of work (again: it is protected if either declaration says so)."""
        record = self.work.setdefault(name, WorkRecord())
        record.protected = record.protected or bool(protected)

    def start(self) -> None:
        """Start the run's clock (a resumed run's totals go on from its checkpoint)."""
        self._started = self.clock()
        self._own_at_start = self.own_seconds

    def timing(self, name: str) -> _Timing:
        """``with budget.timing(name):`` charges the block's time to ``name`` (less that of the pieces nested in it)."""
        return _Timing(self, name)

    def charge(self, name: str, seconds: float) -> None:
        """Add ``seconds`` of capgeo's time to ``name`` (declared optional if it was not declared)."""
        record = self.work.get(name)
        if record is None:
            record = self.work[name] = WorkRecord()
        record.seconds += seconds

    @property
    def own_seconds(self) -> float:
        """capgeo's time so far, every piece."""
        return sum(record.seconds for record in self.work.values())

    @property
    def run_seconds(self) -> float:
        """The run's own time so far: since :meth:`start`, less capgeo's (plus a resumed run's earlier parts)."""
        if self._started is None:
            return self._carried
        return self._carried + (self.clock() - self._started) - (self.own_seconds - self._own_at_start)

    @property
    def measured_share(self) -> float | None:
        """capgeo's time over the run's own so far (None before the run has taken any time)."""
        run = self.run_seconds
        return self.own_seconds / run if run > 0 else None

    def protects(self, step: int) -> bool:
        """Whether the evaluation at ``step`` is in the protected start of the run."""
        return self.horizon is not None and step <= self.protected_share * self.horizon

    def allows(self, name: str, step: int, agree: Callable[[bool], bool] | None = None) -> bool:
        """Whether ``name``, due at the evaluation at ``step``, runs (asked once per due evaluation: counted).

        ``agree(decision) -> decision``: where several processes measure together (DDP), each process's clock differs,
        so the decision is made the same everywhere (rank zero's, broadcast) before it is counted.
        """
        record = self.work.get(name)
        if record is None:
            self.add_work(name)
            record = self.work[name]
        runs = record.protected or self.protects(step) or self._fits(record)
        if agree is not None:
            runs = bool(agree(runs))
        record.due += 1
        if runs:
            record.runs += 1
        else:
            record.thinned += 1
        return runs

    def _fits(self, record: WorkRecord) -> bool:
        """Whether one more run of an optional piece fits in its equal part of what the protected work leaves."""
        optional = [r for r in self.work.values() if not r.protected]
        protected = sum(r.seconds for r in self.work.values() if r.protected)
        part = (self.share * self.run_seconds - protected) / len(optional)
        return record.seconds + record.mean_cost <= part

    def record(self) -> dict[str, Any]:
        """What the summary keeps: the budget, the share measured, the run's and capgeo's seconds, where the protected
        start ends, and per piece of work its seconds, due, runs and thinned evaluations."""
        share, horizon = self.measured_share, self.horizon
        return {"budget": self.share, "share": share, "kept": None if share is None else share <= self.share,
                "run_seconds": self.run_seconds, "capgeo_seconds": self.own_seconds,
                "protected_until_step": None if horizon is None else math.floor(self.protected_share * horizon),
                "thinned": sum(record.thinned for record in self.work.values()),
                "work": {name: asdict(record) for name, record in self.work.items()}}

    def state_dict(self) -> dict[str, Any]:
        """The totals a checkpoint keeps, so that a resumed run's budget goes on over the whole run."""
        return {"run_seconds": self.run_seconds, "work": {name: asdict(r) for name, r in self.work.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._carried = float(state.get("run_seconds", 0.0))
        for name, fields in (state.get("work") or {}).items():
            record = self.work.setdefault(name, WorkRecord())
            protected = record.protected
            for key, value in fields.items():
                if hasattr(record, key):
                    setattr(record, key, type(getattr(record, key))(value))
            record.protected = protected or record.protected
        if self._started is not None:
            self.start()
