"""Stop a run whose capability will not arrive within its budget, in the spirit of Lightning's ``EarlyStopping``.

One method decides, :meth:`CapabilityStopper.should_stop`, on a :class:`~capgeo_callbacks.rules.RunView` of the
run so far, so the same decision runs live (this callback, reading the :class:`PrecursorDetector`'s record), in a
Tune stopper or an Optuna pruner (:mod:`capgeo_callbacks.integrations.tuning`), and offline on recorded summaries. Two
reasons stop a run that has not acquired (0.5 held for 3 evaluations):

- **no learning onset**: by ``onset_by`` of the budget, the onset rule (default
  :class:`~capgeo_callbacks.rules.LossOnsetRule`: the answer log-prob has left the level of an answer that ignores
  the question) has not fired: the run has not started learning;
- **forecast beyond the budget**: from ``decide_from`` of the budget on, the forecaster (default: the registered
  one, per-token accuracy extrapolated to where the whole answer is right half the time) has put acquisition
  beyond ``reach`` times the budget (or "not within reach") at each of the last ``patience`` evaluations.

A rule that lacks its inputs (a run that logs no ``val/logprob``) never stops a run.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from capgeo_callbacks.callbacks.base import measurements_of
from capgeo_callbacks.callbacks.precursor_detector import PrecursorDetector
from capgeo_callbacks.detection.events import detect_acquisition
from capgeo_callbacks.rules import LossOnsetRule, Rule, RunView, ThresholdForecaster, rule_output

__all__ = ["CapabilityStopper", "replay_stop"]

log = logging.getLogger("capgeo")


def _has_inputs(rule: Rule, run: RunView) -> bool:
    """Whether ``run`` has every series and run fact ``rule`` needs (its :class:`~capgeo_callbacks.rules.Needs`)."""
    return not rule.needs.missing(run.series, run.info)


class CapabilityStopper(Callback):
    """Stop training when the capability will not arrive within the budget (module docstring).

    Needs a :class:`~capgeo_callbacks.PrecursorDetector` among the trainer's callbacks: it owns the run's record.

    Args:
        forecaster: the forecaster whose "beyond the budget" stops a run (None: never on a forecast).
        onset_rule: the rule whose silence by ``onset_by`` stops a run (None: never for no onset).
        budget: the step budget (default: the detector's ``run_info["max_steps"]``, else ``trainer.max_steps``).
        reach: a forecast beyond ``reach * budget`` counts as "will not arrive".
        decide_from: the share of the budget before which no forecast stops a run.
        onset_by: the share of the budget by which learning must have started.
        patience: consecutive evaluations whose forecast is beyond reach before stopping.
        threshold: the acquisition accuracy (held ``acquisition_patience`` evaluations, a run is never stopped).
        acquisition_patience: evaluations the accuracy must hold ``threshold``.

    Attributes:
        stopped_step: the step at which it stopped the run (None: it did not).
        stopped_reason: why, in words (None: it did not).

    Example::

        trainer = Trainer(callbacks=[RankMeMonitor(), PrecursorDetector(run_info=...), CapabilityStopper()])
    """

    def __init__(self, forecaster: Rule | None = None, onset_rule: Rule | None = None, budget: int | None = None,
                 reach: float = 1.0, decide_from: float = 0.25, onset_by: float = 0.25, patience: int = 3,
                 threshold: float = 0.5, acquisition_patience: int = 3) -> None:
        for name, value in (("decide_from", decide_from), ("onset_by", onset_by)):
            if not 0 <= value <= 1:
                raise ValueError(f"{name} must be a share of the budget in [0, 1], got {value!r}")
        if reach <= 0:
            raise ValueError(f"reach must be > 0 (a multiple of the budget), got {reach!r}")
        if budget is not None and budget < 1:
            raise ValueError(f"budget must be at least 1 step or None, got {budget!r}")
        if patience < 1 or acquisition_patience < 1:
            raise ValueError(f"patience and acquisition_patience must be at least 1, got {patience}, "
                             f"{acquisition_patience}")
        for name, rule in (("forecaster", forecaster), ("onset_rule", onset_rule)):
            if rule is not None and not isinstance(rule, Rule):
                raise ValueError(f"{name} must be a capgeo_callbacks.rules.Rule or None, got {rule!r}")
        self.forecaster = ThresholdForecaster("token_acc", window=1.0, horizon=None) if forecaster is None \
            else forecaster
        self.onset_rule = LossOnsetRule() if onset_rule is None else onset_rule
        self.budget, self.reach, self.patience = budget, float(reach), int(patience)
        self.decide_from, self.onset_by = float(decide_from), float(onset_by)
        self.threshold, self.acquisition_patience = float(threshold), int(acquisition_patience)
        self.stopped_step: int | None = None
        self.stopped_reason: str | None = None

    @classmethod
    def without(cls, forecast: bool = False, onset: bool = False, **settings: Any) -> CapabilityStopper:
        """A stopper with only one of its two reasons (``forecast=True`` leaves the forecast out)."""
        stopper = cls(**settings)
        if forecast:
            stopper.forecaster = None  # type: ignore[assignment]
        if onset:
            stopper.onset_rule = None  # type: ignore[assignment]
        return stopper

    def settings(self) -> dict[str, Any]:
        """Everything that decides a stop, as JSON (what a settings file commits)."""
        describe = lambda rule: None if rule is None else {"class": type(rule).__name__,  # noqa: E731
                                                            "settings": rule.settings()}
        return {"forecaster": describe(self.forecaster), "onset_rule": describe(self.onset_rule),
                "budget": self.budget, "reach": self.reach, "decide_from": self.decide_from,
                "onset_by": self.onset_by, "patience": self.patience, "threshold": self.threshold,
                "acquisition_patience": self.acquisition_patience}

    def should_stop(self, run: RunView, budget: int | None = None) -> tuple[bool, str]:
        """Whether the run so far should stop, and why (or why not), in words.

        Args:
            run: the run's series so far.
            budget: its step budget (default: ``self.budget``, else ``run.max_steps``).
        """
        budget = budget or self.budget or run.max_steps
        if not run.steps or budget is None:
            return False, "no evaluation or no budget yet"
        if detect_acquisition(run.steps, run.values("acc"), self.threshold, self.acquisition_patience) is not None:
            return False, "acquired"
        if (self.onset_rule is not None and run.step >= self.onset_by * budget
                and _has_inputs(self.onset_rule, run) and not self.onset_rule.update(run, []).alerts):
            return True, (f"no learning onset ({self.onset_rule.name}) by step {run.step}, "
                          f"{run.step / budget:.0%} of the budget of {budget}")
        if (self.forecaster is not None and run.step >= self.decide_from * budget
                and len(run.steps) >= self.patience and _has_inputs(self.forecaster, run)):
            predicted = [self._forecast(run.prefix(end)) for end in range(len(run.steps) - self.patience + 1,
                                                                          len(run.steps) + 1)]
            if all(p is not None and p > self.reach * budget for p in predicted):
                last = predicted[-1]
                where = "not within reach" if last is None or math.isinf(last) else f"at step {last:.0f}"
                return True, (f"{self.forecaster.name} forecasts acquisition {where}, beyond "
                              f"{self.reach:g} x the budget of {budget}, at {self.patience} evaluations in a row")
        return False, "may still arrive"

    def _forecast(self, run: RunView) -> float | None:
        made = rule_output(self.forecaster, run, []).forecast
        return None if made is None else made.predicted

    @staticmethod
    def detector(trainer: pl.Trainer) -> PrecursorDetector:
        found = [cb for cb in trainer.callbacks if isinstance(cb, PrecursorDetector)]
        if not found:
            raise ValueError("CapabilityStopper needs a PrecursorDetector among the trainer's callbacks: it reads "
                             "the run's record from it")
        return found[0]

    @staticmethod
    def view(trainer: pl.Trainer) -> RunView:
        """The run so far, as the detector records it (its measure series included)."""
        detector = CapabilityStopper.detector(trainer)
        return detector.tracker.view(measurements_of(trainer, trainer.lightning_module).series)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.detector(trainer)  # a clear error before training, not at the first evaluation

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit" or self.stopped_step is not None:
            return
        budget = self.budget or self.detector(trainer).run_info.get("max_steps") or trainer.max_steps
        stop, reason = self.should_stop(self.view(trainer), budget if budget and budget > 0 else None)
        stop = bool(trainer.strategy.reduce_boolean_decision(stop, all=False))  # every rank stops together
        if stop:
            trainer.should_stop = True
            self.stopped_step, self.stopped_reason = trainer.global_step, reason
            # the summary, written once at the end of fit, says why the run ended early
            self.detector(trainer).session.add_run_info(
                {"stopped": {"by": type(self).__name__, "step": self.stopped_step, "reason": reason}})
            if trainer.is_global_zero:
                log.warning(f"CapabilityStopper: stopping at step {trainer.global_step}: {reason}")

    def state_dict(self) -> dict[str, Any]:
        return {"stopped_step": self.stopped_step, "stopped_reason": self.stopped_reason}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.stopped_step = state_dict.get("stopped_step")
        self.stopped_reason = state_dict.get("stopped_reason")

    def __repr__(self) -> str:
        return f"CapabilityStopper({self.settings()})"


def replay_stop(stopper: CapabilityStopper, run: RunView, budget: int | None = None) -> tuple[int | None, str]:
    """The step at which ``stopper`` would have stopped a recorded run (None: it runs to its end), and why."""
    for end in range(1, len(run.steps) + 1):
        stop, reason = stopper.should_stop(run.prefix(end), budget)
        if stop:
            return run.steps[end - 1], reason
    return None, ""
