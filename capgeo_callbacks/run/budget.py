r"""The overhead budget
===================

capgeo's own time held under a share of the run's, over the whole run (docs/overhead.md). An
:class:`OverheadBudget` is a pure controller (no framework in it; its clocks are injectable). It is told capgeo's
pieces of work and the kind of each (:data:`FIXED`, :data:`RULE_INPUT`, :data:`OPTIONAL`), times each piece
(:meth:`~OverheadBudget.timing`, wall and CPU time, exclusive of nested pieces) and decides at each evaluation whether
a piece that is due runs (:meth:`~OverheadBudget.allows`). The run's own time is the time since
:meth:`~OverheadBudget.start` less capgeo's: what the same run takes without capgeo, so capgeo's share is what a run
with capgeo against one without measures (their ratio less one). The rule, over the whole run:

- the budget is ``share`` of the whole run's own time, projected at each evaluation from the time so far and the
  pace (time per step) since the protected start;
- the protected start (the evaluations in the first ``protected_share`` of the run's steps, where the schedule is
  dense and the study's collapse happens) measures everything and draws on the budget first; a start that alone
  spends more than the whole budget says so once, with its figure;
- after it, each evaluation plans the rest of the run with what the budget has left: the fixed work (the detector,
  which runs the rules) always runs; the rules' inputs run at one in ``stride`` of the evaluations they are due at,
  the smallest stride with which they fit (it only grows, up to ``max_stride``: never dropped), so their cadence is
  even and the rules read it as they read any schedule; the optional work runs only while the rules' inputs are
  whole, each piece at an even rate, sharing equally what the rules' inputs leave;
- whatever it thins, it says once, where it starts to (the optional work, then the rules' inputs), with the figure:
  capgeo's share so far and each piece's evaluations kept of those it was due at, so far and over the run.

``"measure"`` (:data:`MEASURE`) times everything and thins nothing: the share is recorded, every series is what it
is with the budget off. The setting is checked in one place, :func:`check_overhead_budget`; the Lightning glue is
:class:`~capgeo_callbacks.PrecursorDetector`, which hands its session's budget to the measure callbacks.

Example::

    budget = OverheadBudget(0.03, horizon=3000)
    budget.add_work("rankme", RULE_INPUT)
    budget.start()
    if budget.allows("rankme", step):
        with budget.timing("rankme"):
            ...
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any

from capgeo_callbacks.run.overhead_setting import (
    DEFAULT_OVERHEAD_BUDGET,
    MEASURE,
    OverheadSetting,
    check_overhead_budget,
    overhead_budget_arg,
    steps_of,
)

__all__ = ["DEFAULT_OVERHEAD_BUDGET", "FIXED", "MAX_STRIDE", "MEASURE", "OPTIONAL", "PROTECTED_SHARE", "RULE_INPUT",
           "OverheadBudget", "OverheadSetting", "WorkRecord", "check_overhead_budget", "fair_rates",
           "overhead_budget_arg", "steps_of"]

log = logging.getLogger("capgeo")

PROTECTED_SHARE = 0.1  # evaluations in the first tenth of the run's steps measure everything
MAX_STRIDE = 8  # the rules' inputs: measured at one in 8 of their due evaluations at the least, never dropped
FIXED, RULE_INPUT, OPTIONAL = "fixed", "rule input", "optional"  # the kinds of work, thinned never, last, first
KINDS = (FIXED, RULE_INPUT, OPTIONAL)
CLOCKS = ("cpu", "wall")  # the clocks a record gives shares on
_MEASURE_HINT = f" (overhead_budget={MEASURE!r} measures every evaluation and only times)"  # ends what thinning says


def fair_rates(demands: Mapping[str, float], room: float) -> dict[str, float]:
    """Each piece's share of its due evaluations to run at, in [0, 1]: ``room`` (seconds) shared equally among pieces
    that would spend ``demands`` (seconds) at every one, a piece that needs less than its part leaving the rest to the
    others (water-filling)."""
    rates: dict[str, float] = {}
    for index, (name, demand) in enumerate(sorted(demands.items(), key=lambda item: item[1])):
        part = max(0.0, room) / (len(demands) - index)
        rates[name] = 1.0 if demand <= part else part / demand
        room -= rates[name] * demand
    return rates


@dataclass
class WorkRecord:
    """One piece of capgeo's work in the budget's record.

    Attributes:
        kind: :data:`FIXED` (never thinned: the detector), :data:`RULE_INPUT` (what the run's rules read: thinned
            last, evenly) or :data:`OPTIONAL` (thinned first).
        seconds: capgeo's wall time spent on it (exclusive of nested pieces).
        cpu_seconds: the same in process CPU time.
        due: evaluations at which it was due (its own cadence said so) and asked to run.
        runs: evaluations at which it ran.
        thinned: evaluations at which it was due and the budget left it out.
    """

    kind: str = OPTIONAL
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    due: int = 0
    runs: int = 0
    thinned: int = 0

    @property
    def mean_cost(self) -> float:
        """Its wall time per run so far (0 before it first ran)."""
        return self.seconds / self.runs if self.runs else 0.0


class _Timing:
    """Times one piece of work on both clocks (exclusive of the pieces nested in it)."""

    __slots__ = ("budget", "name")

    def __init__(self, budget: OverheadBudget, name: str) -> None:
        self.budget, self.name = budget, name

    def __enter__(self) -> None:
        self.budget._open.append([self.budget.clock(), self.budget.cpu_clock(), 0.0, 0.0])

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        budget = self.budget
        wall, cpu, nested_wall, nested_cpu = budget._open.pop()
        wall, cpu = budget.clock() - wall, budget.cpu_clock() - cpu
        budget.charge(self.name, wall - nested_wall, cpu - nested_cpu)
        if budget._open:
            budget._open[-1][2] += wall
            budget._open[-1][3] += cpu


class OverheadBudget:
    """Keeps capgeo's share of a run's time under ``share`` over the whole run, or only measures it (module docstring).

    Args:
        share: the budget, a share of the run's time in (0, 1), or ``"measure"`` (:func:`check_overhead_budget`).
        horizon: the run's steps; evaluations at steps up to ``protected_share * horizon`` are the protected start,
            and the rest of the run is projected to it, or to ``stop`` where this fit stops earlier (None: no
            protected start, no projection).
        clock: wall seconds, monotonic (default :func:`time.perf_counter`; tests inject their own). It decides.
        cpu_clock: process CPU seconds (default :func:`time.process_time`); recorded beside the wall time.
        protected_share: the share of the run's steps at the start whose evaluations measure everything.
        max_stride: the rules' inputs run at one in ``max_stride`` of their due evaluations at the least.
        warn: ``warn(key, message)``, how the budget says once that it cannot hold (default: a ``logging``
            warning on the ``capgeo`` logger).

    Raises:
        ValueError: on a bad argument (a share of None, 0 or ``"off"`` is no budget: build none).
    """

    def __init__(self, share: float | str, *, horizon: int | None = None,
                 clock: Callable[[], float] = time.perf_counter, cpu_clock: Callable[[], float] = time.process_time,
                 protected_share: float = PROTECTED_SHARE, max_stride: int = MAX_STRIDE,
                 warn: Callable[[str, str], Any] | None = None) -> None:
        checked = check_overhead_budget(share)
        if checked is None:
            raise ValueError("an overhead budget of None, 0 or 'off' is no budget: build no OverheadBudget")
        for name, value in (("clock", clock), ("cpu_clock", cpu_clock), ("warn", warn)):
            if value is not None and not callable(value):
                raise ValueError(f"{name} must be callable, got {value!r}")
        if isinstance(protected_share, bool) or not isinstance(protected_share, (int, float)) \
                or not 0 <= protected_share <= 1:
            raise ValueError(f"protected_share must be in [0, 1], got {protected_share!r}")
        if isinstance(max_stride, bool) or not isinstance(max_stride, int) or max_stride < 1:
            raise ValueError(f"max_stride must be a positive integer, got {max_stride!r}")
        self.share: float | None = None if checked == MEASURE else float(checked)
        self.horizon = horizon
        self.stop: int | None = None  # where this fit stops, if before the horizon (a run stopped early)
        self.clock, self.cpu_clock = clock, cpu_clock
        self.protected_share = float(protected_share)
        self.max_stride = max_stride
        self.warn = warn
        self.work: dict[str, WorkRecord] = {}
        self.stride = 1  # the rules' inputs run at one in `stride` of their due evaluations after the protected start
        self.evaluations = 0
        self.protected_start: dict[str, Any] | None = None  # the totals where it ended, and what it cost
        self.said: dict[str, str] = {}  # what the budget said, once each (kept over a resume)
        self._open: list[list[float]] = []  # per open timing: wall and CPU start, nested wall and CPU time
        self._carried = (0.0, 0.0)  # the run's own wall and CPU time before this process started (a resumed run)
        self._started: tuple[float, float] | None = None
        self._own_at_start = (0.0, 0.0)
        self._marks: list[tuple[int, float]] = []  # (step, run seconds) at the latest two evaluations
        self._rates: dict[str, float] = {}  # optional pieces: the share of their due evaluations they run at
        self._since: dict[str, int] = {}  # rule inputs: due evaluations since each last ran
        self._credit: dict[str, float] = {}  # optional pieces: their rate summed since each last ran

    @property
    def horizon(self) -> int | None:
        return self._horizon

    @horizon.setter
    def horizon(self, value: int | None) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"horizon must be a positive number of steps or None, got {value!r}")
        self._horizon = value

    @property
    def thins(self) -> bool:
        """Whether this budget thins (False: ``"measure"``, it only times)."""
        return self.share is not None

    def add_work(self, name: str, kind: str = OPTIONAL) -> None:
        """Declare a piece of work (again: the kind thinned later of the two declarations wins)."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind of work {kind!r}; valid: {', '.join(KINDS)}")
        record = self.work.setdefault(name, WorkRecord(kind))
        record.kind = min(record.kind, kind, key=KINDS.index)

    def start(self) -> None:
        """Start the run's clocks (a resumed run's totals go on from its checkpoint)."""
        self._started = (self.clock(), self.cpu_clock())
        self._own_at_start = (self.own_seconds, self.own_cpu_seconds)

    def timing(self, name: str) -> _Timing:
        """``with budget.timing(name):`` charges the block's time to ``name`` (less that of the pieces nested in it)."""
        return _Timing(self, name)

    def charge(self, name: str, seconds: float, cpu_seconds: float = 0.0) -> None:
        """Add ``seconds`` (wall) and ``cpu_seconds`` of capgeo's time to ``name`` (optional if it was not declared)."""
        record = self.work.setdefault(name, WorkRecord())
        record.seconds += seconds
        record.cpu_seconds += cpu_seconds

    @property
    def own_seconds(self) -> float:
        """capgeo's wall time so far, every piece."""
        return sum(record.seconds for record in self.work.values())

    @property
    def own_cpu_seconds(self) -> float:
        """capgeo's CPU time so far, every piece."""
        return sum(record.cpu_seconds for record in self.work.values())

    @property
    def run_seconds(self) -> float:
        """The run's own wall time so far: since :meth:`start`, less capgeo's (plus a resumed run's earlier parts)."""
        return self._run_time(0)

    @property
    def run_cpu_seconds(self) -> float:
        """The run's own CPU time so far, likewise."""
        return self._run_time(1)

    def _run_time(self, index: int) -> float:
        if self._started is None:
            return self._carried[index]
        now = (self.clock, self.cpu_clock)[index]()
        own = (self.own_seconds, self.own_cpu_seconds)[index]
        return self._carried[index] + now - self._started[index] - (own - self._own_at_start[index])

    @property
    def measured_share(self) -> float | None:
        """capgeo's wall time over the run's own so far (None before the run has taken any time)."""
        return _ratio(self.own_seconds, self.run_seconds)

    def progress(self) -> str | None:
        """The share so far as a progress bar shows it: ``2.1%/3%`` against the budget, ``2.1%`` measured only."""
        share = self.measured_share
        if share is None:
            return None
        return f"{100 * share:.1f}%" + ("" if self.share is None else f"/{100 * self.share:g}%")

    def protects(self, step: int) -> bool:
        """Whether the evaluation at ``step`` is in the protected start of the run."""
        return self.horizon is not None and step <= self.protected_share * self.horizon

    def evaluation(self, step: int) -> None:
        """Note the evaluation at ``step`` (the first ask at a step notes it too): past the protected start, the rest
        of the run is planned here, once per evaluation."""
        if self._marks and step <= self._marks[-1][0]:
            return
        self.evaluations += 1
        self._marks = [*self._marks[-1:], (step, self.run_seconds)]
        if self.protects(step):
            return
        if self.protected_start is None:
            self._end_start(step)
        if self.share is not None:
            self._plan(step)

    def allows(self, name: str, step: int, agree: Callable[[bool], bool] | None = None) -> bool:
        """Whether ``name``, due at the evaluation at ``step``, runs (asked once per due evaluation: counted).

        ``agree(decision) -> decision``: where several processes measure together (DDP), each process's clock differs,
        so the decision is made the same everywhere (rank zero's, broadcast) before it is counted.
        """
        record = self.work.setdefault(name, WorkRecord())
        self.evaluation(step)
        thinning = self.share is not None and not self.protects(step)
        rate = self._rates.get(name, 1.0)
        if not thinning or record.kind == FIXED:
            runs = True
        elif record.kind == RULE_INPUT:
            runs = self._since.get(name, self.stride) + 1 >= self.stride
        else:
            runs = self._credit.get(name, 0.0) + rate >= 1 - 1e-9
        if agree is not None:
            runs = bool(agree(runs))
        record.due += 1
        record.runs += runs
        record.thinned += not runs
        self._since[name] = 0 if runs else self._since.get(name, 0) + 1
        if thinning and record.kind == OPTIONAL:
            self._credit[name] = min(1.0, self._credit.get(name, 0.0) + rate) - runs
        return runs

    def _projection(self, step: int) -> tuple[float, float]:
        """The whole run's own time, projected from its time so far and its pace since the protected start, and the
        evaluations left (this one included); without a horizon, or at it, the time so far and this evaluation."""
        run, end = self._marks[-1][1], min(self.horizon or 0, self.stop or self.horizon or 0)
        if step >= end:
            return run, 1.0
        origin = self.protected_start
        if origin is not None and step > origin["step"]:  # since the start: the run's even part
            steps, seconds = step - origin["step"], run - origin["run_seconds"]
            evaluations = self.evaluations - origin["evaluations"]
        elif len(self._marks) == 2:  # its first evaluation: the interval before it
            steps, seconds, evaluations = step - self._marks[0][0], run - self._marks[0][1], 1
        else:
            steps, seconds, evaluations = max(step, 1), run, self.evaluations
        left = end - step
        return run + left * seconds / steps, 1.0 + left * evaluations / steps

    def _end_start(self, step: int) -> None:
        """At the first evaluation past the protected start: the totals there, and what the start cost against the
        whole run's budget (said once where it alone exceeds it)."""
        spent = self.own_seconds
        self.protected_start = {"step": step, "evaluations": self.evaluations, "run_seconds": self._marks[-1][1],
                                "capgeo_seconds": spent, "run_cpu_seconds": self.run_cpu_seconds,
                                "capgeo_cpu_seconds": self.own_cpu_seconds}
        if self.horizon is None:
            return
        projected, _ = self._projection(step)
        share = _ratio(spent, projected)
        self.protected_start.update(projected_run_seconds=projected, share_of_run=share)
        if self.share is not None and share is not None and share > self.share:
            until = math.floor(self.protected_share * self.horizon)
            kept = self._kept(self._projection(step)[1], self.max_stride)
            self._say("protected start", f"the protected start (the first {self.protected_share:.0%} of the run's "
                      f"steps, to step {until}) took {spent:.2f} s of capgeo's time, {100 * share:.1f}% of this run's "
                      f"projected {projected:.0f} s: more than its whole overhead budget of {100 * self.share:g}%, "
                      "which cannot hold on this run (a short or densely evaluated run); after it capgeo runs nothing "
                      f"optional and measures the rules' inputs at one in {self.max_stride} of their evaluations"
                      + (f" ({kept})" if kept else "") + _MEASURE_HINT)

    def _plan(self, step: int) -> None:
        """The stride of the rules' inputs and the rates of the optional pieces for what the budget has left."""
        projected, evaluations = self._projection(step)
        seen = max(1, self.evaluations - 1)  # the evaluations before this one

        def demand(kind: str) -> dict[str, float]:  # seconds over the evaluations left, at every due one
            return {name: evaluations * (r.seconds if kind == FIXED else r.mean_cost * r.due) / seen
                    for name, r in self.work.items() if r.kind == kind}

        room = self.share * projected - self.own_seconds - sum(demand(FIXED).values())
        rules = sum(demand(RULE_INPUT).values())
        needed = max(1, math.ceil(rules / room - 1e-9)) if room > 0 and rules < room * self.max_stride else math.inf
        if rules > 0:
            self.stride = min(self.max_stride, max(self.stride, needed))
        self._rates = fair_rates(demand(OPTIONAL), room - rules if self.stride == 1 else 0.0)
        if "protected start" in self.said:  # said already: nothing optional, the rules' inputs at their least
            return
        so_far = f"capgeo {100 * (self.measured_share or 0):.1f}% of the run's time so far"
        if needed > self.max_stride and rules > 0:
            self._say("floor", f"capgeo's detector and the rules' inputs at one in {self.max_stride} of their "
                      f"evaluations need more than the overhead budget of {100 * self.share:g}% leaves: it cannot "
                      f"hold on this run ({so_far}; {self._kept(evaluations, self.max_stride)})" + _MEASURE_HINT)
        elif self.stride > 1:
            self._say("rules' inputs", f"to hold capgeo's overhead budget of {100 * self.share:g}% ({so_far}), from "
                      f"step {step} on the rules' inputs are measured at one in {self.stride} of their evaluations, "
                      f"evenly, and nothing optional runs: {self._kept(evaluations, self.stride)}; the stride grows, "
                      f"up to one in {self.max_stride}, where the run needs it" + _MEASURE_HINT)
        elif thinned := [(name, rate) for name, rate in self._rates.items() if rate < 1 and self.work[name].due]:
            self._say("optional", f"to hold capgeo's overhead budget of {100 * self.share:g}% ({so_far}), from "
                      f"step {step} on what no rule reads is measured less often: " + "; ".join(
                          f"{name} at about {100 * rate:.0f}% of its evaluations "
                          f"({self._figure(name, evaluations, rate)})" for name, rate in thinned)
                      + "; the rules' inputs stay whole while they fit" + _MEASURE_HINT)

    def _figure(self, name: str, evaluations: float, rate: float) -> str:
        """``name``'s evaluations kept of those it was due at so far, and over the run if it runs at ``rate`` of its
        due evaluations from here (``evaluations`` left, this one included)."""
        record = self.work[name]
        due = evaluations * record.due / max(1, self.evaluations - 1)  # its due evaluations still to come
        return (f"{record.runs} of {record.due} so far, about {round(record.runs + rate * due)} of "
                f"{round(record.due + due)} over the run")

    def _kept(self, evaluations: float, stride: int) -> str:
        """The rules' inputs' evaluations kept, so far and over the run at one in ``stride`` from here."""
        return "; ".join(f"{name} {self._figure(name, evaluations, 1 / stride)}"
                         for name, record in self.work.items() if record.kind == RULE_INPUT and record.due)

    def _say(self, key: str, message: str) -> None:
        if key in self.said:
            return
        self.said[key] = message
        if self.warn is not None:
            self.warn(f"overhead budget: {key}", message)
        else:
            log.warning("%s", message)

    def record(self) -> dict[str, Any]:
        """What the summary keeps (``overhead``): the setting, capgeo's share of the run's CPU and wall time over the
        whole run and after the protected start, whether the budget was kept, the seconds, what the protected start
        cost, the rules' inputs' stride, and per piece of work its kind, seconds, due, runs and thinned evaluations."""
        run, run_cpu, own, own_cpu = self.run_seconds, self.run_cpu_seconds, self.own_seconds, self.own_cpu_seconds
        share, start, horizon = _ratio(own, run), self.protected_start, self.horizon
        after = {clock: None for clock in CLOCKS} if start is None else {
            "cpu": _ratio(own_cpu - start["capgeo_cpu_seconds"], run_cpu - start["run_cpu_seconds"]),
            "wall": _ratio(own - start["capgeo_seconds"], run - start["run_seconds"])}
        return {"setting": MEASURE if self.share is None else self.share, "budget": self.share, "share": share,
                "kept": None if share is None or self.share is None else share <= self.share,
                "shares": {"whole_run": {"cpu": _ratio(own_cpu, run_cpu), "wall": share}, "after_start": after},
                "run_seconds": run, "capgeo_seconds": own, "run_cpu_seconds": run_cpu, "capgeo_cpu_seconds": own_cpu,
                "protected_until_step": None if horizon is None else math.floor(self.protected_share * horizon),
                "protected_start": start, "rule_input_stride": self.stride, "max_stride": self.max_stride,
                "said": list(self.said.values()), "thinned": sum(record.thinned for record in self.work.values()),
                "work": {name: asdict(record) for name, record in self.work.items()}}

    def state_dict(self) -> dict[str, Any]:
        """The totals a checkpoint keeps, so that a resumed run's budget goes on over the whole run."""
        return {"run_seconds": self.run_seconds, "run_cpu_seconds": self.run_cpu_seconds,
                "work": {name: asdict(r) for name, r in self.work.items()}, "stride": self.stride,
                "evaluations": self.evaluations, "marks": [list(mark) for mark in self._marks],
                "protected_start": self.protected_start, "said": dict(self.said)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._carried = (float(state.get("run_seconds", 0.0)), float(state.get("run_cpu_seconds", 0.0)))
        for name, fields in (state.get("work") or {}).items():
            record = self.work.setdefault(name, WorkRecord())
            kind = record.kind
            for key, value in fields.items():
                if hasattr(record, key) and key != "kind":
                    setattr(record, key, type(getattr(record, key))(value))
            record.kind = kind
        self.stride = max(1, int(state.get("stride", 1)))
        self.evaluations = int(state.get("evaluations", 0))
        self._marks = [(int(step), float(seconds)) for step, seconds in state.get("marks") or []]
        self.protected_start = state.get("protected_start") and dict(state["protected_start"])
        self.said = dict(state.get("said") or {})
        if self._started is not None:
            self.start()


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None
