"""capgeo's pieces on one Trainer, each joined at its ``setup``.

Lightning calls every callback's ``setup`` before training starts, in the order of the Trainer's callbacks. Each
capgeo callback joins there the :class:`Joined` record of its Trainer (kept in a weak mapping keyed by the Trainer, so
it goes with it): a detector its run engine, a measure itself. Nothing searches ``trainer.callbacks``: the detector
reads the measures that joined, a stopper or a progress bar the engine that joined, and an order that matters is
checked there (a piece that needs the engine joins after it: it is listed after the detector).
"""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

from capgeo_callbacks.engine.measure import Measure
from capgeo_callbacks.engine.run import RunEngine

__all__ = ["Joined", "joined"]


class Joined:
    """The capgeo pieces that joined one Trainer, in the order they joined (the order of its callbacks)."""

    def __init__(self) -> None:
        self.engines: list[RunEngine] = []
        self.measures: list[Measure] = []

    @property
    def engine(self) -> RunEngine | None:
        """The run's engine (the first detector's), once its detector has joined."""
        return self.engines[0] if self.engines else None

    def join_engine(self, engine: RunEngine) -> None:
        if not any(one is engine for one in self.engines):
            self.engines.append(engine)

    def join_measure(self, measure: Measure) -> None:
        if not any(one is measure for one in self.measures):
            self.measures.append(measure)

    def engine_before(self, who: str, engine: RunEngine | None = None) -> RunEngine:
        """The run engine ``who`` reads after each validation (``engine``, a detector's, or the first joined): its
        detector updates the run at each validation's end, so it must be listed before ``who``, whose own hook then
        reads this validation, not the one before.

        Raises:
            ValueError: where no such detector joined before ``who`` (none among the callbacks, or listed after it).
        """
        if engine is None and self.engine is not None:
            return self.engine
        if engine is not None and any(one is engine for one in self.engines):
            return engine
        given = "the detector it was given" if engine is not None else "a PrecursorDetector"
        raise ValueError(f"{who} reads the run that {given} updates at each validation: list that detector among "
                         f"the Trainer's callbacks, before the {who} (callbacks=[..., PrecursorDetector(...), "
                         f"{who}(...)])")


_JOINED: WeakKeyDictionary[Any, Joined] = WeakKeyDictionary()


def joined(trainer: Any) -> Joined:
    """The capgeo pieces that joined ``trainer`` so far (an empty record for a Trainer none has joined)."""
    record = _JOINED.get(trainer)
    if record is None:
        record = _JOINED[trainer] = Joined()
    return record
