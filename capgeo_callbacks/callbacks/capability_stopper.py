r"""Capability stopper
==================

Stop a run whose capability will not arrive within its budget, in the spirit of Lightning's ``EarlyStopping``: the
Lightning adapter of the stopping policy (:class:`~capgeo_callbacks.rules.stopping.StoppingPolicy`, where the
decision and its reasons live), asked at every validation on the run's view
(:class:`~capgeo_callbacks.run.view.SessionView`, kept by the :class:`PrecursorDetector`'s session). The detector is
handed over (``detector=``) or is the one listed before the stopper; either way the order is checked at ``setup``, so
that the stopper decides on the validation the detector has just recorded.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from capgeo_callbacks.engine.joined import joined
from capgeo_callbacks.engine.run import RunEngine
from capgeo_callbacks.rules import Rule, RunView
from capgeo_callbacks.rules.stopping import StoppingPolicy

if TYPE_CHECKING:
    from capgeo_callbacks.callbacks.precursor_detector import PrecursorDetector

__all__ = ["CapabilityStopper"]

log = logging.getLogger("capgeo")


class CapabilityStopper(Callback):
    """Stop training when the capability will not arrive within the budget (the policy's reasons:
    :mod:`capgeo_callbacks.rules.stopping`).

    Needs a :class:`~capgeo_callbacks.PrecursorDetector` listed before it among the trainer's callbacks (or handed
    over, ``detector=``, and listed before it): its session keeps the run's view, which the stopper reads after the
    detector has recorded each validation. The summary, written at the end of fit, says why a stopped run ended
    early (``stopped``).

    Args:
        forecaster: the forecaster whose "beyond the budget" stops a run (default: the registered one).
        onset_rule: the rule whose silence by ``onset_by`` stops a run that records its chance level.
        budget: the step budget (default: the detector's ``run_info["max_steps"]``, else ``trainer.max_steps``).
        reach: a forecast beyond ``reach * budget`` counts as "will not arrive".
        decide_from: the share of the budget before which no forecast stops a run.
        onset_by: the share of the budget by which learning must have started.
        patience: consecutive evaluations whose forecast is beyond reach before stopping.
        plateau_rule: the rule whose silence by ``plateau_by`` stops a run that records no chance level.
        plateau_by: the share of the budget by which the accuracy must have left its chance level.
        policy: the policy itself (then the other arguments are its own, not these).
        detector: the detector whose run it decides on (default: the one listed before it).

    Raises:
        ValueError: on a bad setting; in ``setup`` without a :class:`~capgeo_callbacks.PrecursorDetector` listed
            before it.

    Attributes:
        stopped_step: the step at which it stopped the run (None: it did not).
        stopped_reason: why, in words (None: it did not).

    Example::

        trainer = Trainer(callbacks=[RankMeMonitor(), PrecursorDetector(run_info=...), CapabilityStopper()])
    """

    def __init__(self, forecaster: Rule | None = None, onset_rule: Rule | None = None, budget: int | None = None,
                 reach: float = 1.0, decide_from: float = 0.25, onset_by: float = 0.25, patience: int = 3,
                 plateau_rule: Rule | None = None, plateau_by: float = 0.5, *,
                 policy: StoppingPolicy | None = None, detector: PrecursorDetector | None = None) -> None:
        self.policy = policy if policy is not None else StoppingPolicy(
            forecaster, onset_rule, budget, reach, decide_from, onset_by, patience, plateau_rule, plateau_by)
        self.detector = detector
        self.engine: RunEngine | None = None  # the run it decides on, found at setup
        self.stopped_step: int | None = None
        self.stopped_reason: str | None = None

    @classmethod
    def without(cls, forecast: bool = False, onset: bool = False, **settings: Any) -> CapabilityStopper:
        """A stopper with only one of its two reasons (``forecast=True`` leaves the forecast out)."""
        return cls(policy=StoppingPolicy(**settings).without(forecast=forecast, onset=onset))

    def settings(self) -> dict[str, Any]:
        """Everything that decides a stop, as JSON (the policy's settings)."""
        return self.policy.settings()

    def should_stop(self, run: RunView, budget: int | None = None) -> tuple[bool, str]:
        """The policy's decision on the run so far: whether to stop, and why (or why not), in words."""
        return self.policy.should_stop(run, budget)

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":  # a clear error before training, not at the first evaluation
            given = None if self.detector is None else self.detector.engine
            self.engine = joined(trainer).engine_before(type(self).__name__, given)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        engine = self.engine
        if trainer.sanity_checking or trainer.state.fn != "fit" or self.stopped_step is not None or engine is None:
            return
        session = engine.session
        budget = self.policy.budget or session.run_info.get("max_steps") or trainer.max_steps
        stop, reason = self.policy.should_stop(session.view.run, budget if budget and budget > 0 else None)
        stop = bool(trainer.strategy.reduce_boolean_decision(stop, all=False))  # every rank stops together
        if stop:
            trainer.should_stop = True
            self.stopped_step, self.stopped_reason = trainer.global_step, reason
            # the summary, written once at the end of fit, says why the run ended early
            session.add_run_info({"stopped": {"by": type(self).__name__, "step": self.stopped_step, "reason": reason}})
            if trainer.is_global_zero:
                log.warning(f"CapabilityStopper: stopping at step {trainer.global_step}: {reason}")

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"stopped_step": self.stopped_step, "stopped_reason": self.stopped_reason}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.stopped_step = state_dict.get("stopped_step")
        self.stopped_reason = state_dict.get("stopped_reason")

    def __repr__(self) -> str:
        return f"CapabilityStopper({self.settings()})"
