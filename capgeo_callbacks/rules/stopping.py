"""The stopping policy: whether a run that has not acquired should stop, because its capability will not arrive within
its budget. One decision (:meth:`StoppingPolicy.should_stop`, on a :class:`~capgeo_callbacks.rules.RunView` of the run
so far, in the manner of Lightning's ``EarlyStopping``), which the Lightning callback
(:class:`~capgeo_callbacks.callbacks.capability_stopper.CapabilityStopper`), the Tune stopper and the Optuna pruner
(:mod:`capgeo_callbacks.integrations.tuning`) adapt, and which replays on recorded runs (:meth:`StoppingPolicy.replay`).

A run that has acquired (the view's :attr:`~capgeo_callbacks.rules.RunView.acquired_step`, by the run's detection
settings) is never stopped. Two reasons stop one that has not:

- **no learning onset**: by ``onset_by`` of the budget, the onset rule (default
  :class:`~capgeo_callbacks.rules.LossOnsetRule`: the answer log-prob has left the level of an answer that ignores the
  question) has not fired. It is read against the run's chance record: without one, the reference is the loss's own
  early plateau, which any run leaves as soon as it learns the output marginal, shuffled labels included. So a run that
  records no chance level (a user's run logging ``val/acc`` and ``val/loss``) is asked instead whether its accuracy
  has left its chance level (``plateau_rule``, default :class:`~capgeo_callbacks.rules.AccuracyOnsetRule`) by
  ``plateau_by`` of the budget, later than a quarter: a late learner sits at chance for its first quarter;
- **forecast beyond the budget**: from ``decide_from`` of the budget on, the forecaster (default: the registered one,
  per-token accuracy extrapolated to where the whole answer is right half the time) has put acquisition beyond
  ``reach`` times the budget (or "not within reach") at each of the last ``patience`` evaluations.

A rule that lacks its inputs never stops a run. The policy's settings are its numbers and its rules' records
(:func:`~capgeo_callbacks.rules.rule_record`): :meth:`StoppingPolicy.settings` and :meth:`StoppingPolicy.from_settings`
round-trip.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from capgeo_callbacks.rules.base import Rule, RunView, rule_from_record, rule_output, rule_record
from capgeo_callbacks.rules.baselines import LossOnsetRule
from capgeo_callbacks.rules.forecasters import ThresholdForecaster
from capgeo_callbacks.rules.trend import AccuracyOnsetRule

__all__ = ["StoppingPolicy"]

RULES = ("forecaster", "onset_rule", "plateau_rule")


def _has_inputs(rule: Rule, run: RunView) -> bool:
    """Whether ``run`` has every series and run fact ``rule`` needs."""
    return not rule.needs.missing(run.series, run.info)


class StoppingPolicy:
    """Stop a run whose capability will not arrive within its budget (module docstring).

    Args:
        forecaster: the forecaster whose "beyond the budget" stops a run (default: per-token accuracy extrapolated,
            the registered forecaster; None: never on a forecast).
        onset_rule: the rule whose silence by ``onset_by`` stops a run that records its chance level (default
            :class:`~capgeo_callbacks.rules.LossOnsetRule`; None: never for no onset).
        budget: the step budget (default: the run's ``max_steps``).
        reach: a forecast beyond ``reach * budget`` counts as "will not arrive".
        decide_from: the share of the budget before which no forecast stops a run.
        onset_by: the share of the budget by which learning must have started (with a chance record).
        patience: consecutive evaluations whose forecast is beyond reach before stopping.
        plateau_rule: the rule whose silence by ``plateau_by`` stops a run that records no chance level (default
            :class:`~capgeo_callbacks.rules.AccuracyOnsetRule`; None: never).
        plateau_by: the share of the budget by which the accuracy must have left its chance level (no chance record).

    Raises:
        ValueError: on a bad setting.

    Example::

        policy = StoppingPolicy()
        stop, reason = policy.should_stop(RunView.from_points(acc, series, {"max_steps": 3000}))
    """

    def __init__(self, forecaster: Rule | None = None, onset_rule: Rule | None = None, budget: int | None = None,
                 reach: float = 1.0, decide_from: float = 0.25, onset_by: float = 0.25, patience: int = 3,
                 plateau_rule: Rule | None = None, plateau_by: float = 0.5) -> None:
        for name, value in (("decide_from", decide_from), ("onset_by", onset_by), ("plateau_by", plateau_by)):
            if not 0 <= value <= 1:
                raise ValueError(f"{name} must be a share of the budget in [0, 1], got {value!r}")
        if reach <= 0:
            raise ValueError(f"reach must be > 0 (a multiple of the budget), got {reach!r}")
        if budget is not None and budget < 1:
            raise ValueError(f"budget must be at least 1 step or None, got {budget!r}")
        if patience < 1:
            raise ValueError(f"patience must be at least 1, got {patience}")
        for name, rule in (("forecaster", forecaster), ("onset_rule", onset_rule), ("plateau_rule", plateau_rule)):
            if rule is not None and not isinstance(rule, Rule):
                raise ValueError(f"{name} must be a capgeo_callbacks.rules.Rule or None, got {rule!r}")
        self.forecaster: Rule | None = ThresholdForecaster("token_acc", window=1.0, horizon=None) \
            if forecaster is None else forecaster
        self.onset_rule: Rule | None = LossOnsetRule() if onset_rule is None else onset_rule
        self.plateau_rule: Rule | None = AccuracyOnsetRule() if plateau_rule is None else plateau_rule
        self.budget, self.reach, self.patience = budget, float(reach), int(patience)
        self.decide_from, self.onset_by, self.plateau_by = float(decide_from), float(onset_by), float(plateau_by)

    def without(self, forecast: bool = False, onset: bool = False) -> StoppingPolicy:
        """This policy with one of its two reasons left out (``forecast=True`` leaves the forecast out; ``onset=True``
        both onset rules)."""
        policy = StoppingPolicy.from_settings(self.settings())
        if forecast:
            policy.forecaster = None
        if onset:
            policy.onset_rule = policy.plateau_rule = None
        return policy

    def settings(self) -> dict[str, Any]:
        """Everything that decides a stop, as JSON: the numbers, and each rule as its record (None: left out)."""
        records = {name: None if getattr(self, name) is None else rule_record(getattr(self, name)) for name in RULES}
        return {**records, "budget": self.budget, "reach": self.reach, "decide_from": self.decide_from,
                "onset_by": self.onset_by, "patience": self.patience, "plateau_by": self.plateau_by}

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> StoppingPolicy:
        """The policy :meth:`settings` describes (a rule given as None stays left out; one not given is the default).

        Raises:
            ValueError: on an unknown setting, or a rule record that names no rule.
        """
        values = dict(settings)
        records = {name: values.pop(name) for name in RULES if name in values}
        unknown = sorted(set(values) - {"budget", "reach", "decide_from", "onset_by", "patience", "plateau_by"})
        if unknown:
            raise ValueError(f"unknown stopping settings {unknown}; valid: {', '.join(RULES)}, budget, reach, "
                             "decide_from, onset_by, patience, plateau_by")
        rules = {name: rule_from_record(record) for name, record in records.items() if record is not None}
        policy = cls(**rules, **values)
        for name, record in records.items():
            if record is None:
                setattr(policy, name, None)
        return policy

    def should_stop(self, run: RunView, budget: int | None = None) -> tuple[bool, str]:
        """Whether the run so far should stop, and why (or why not), in words.

        Args:
            run: the run's series so far.
            budget: its step budget (default: ``self.budget``, else ``run.max_steps``).
        """
        budget = budget or self.budget or run.max_steps
        if not run.steps or budget is None:
            return False, "no evaluation or no budget yet"
        if run.acquired_step is not None:
            return False, "acquired"
        chance_known = run.info.get("chance") is not None  # the onset rule's reference, where a run records it
        onset, share = (self.onset_rule, self.onset_by) if chance_known else (self.plateau_rule, self.plateau_by)
        if (onset is not None and run.step >= share * budget and _has_inputs(onset, run)
                and not onset.update(run, []).alerts):
            return True, (f"no learning onset ({onset.name}) by step {run.step}, {run.step / budget:.0%} of the "
                          f"budget of {budget}")
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
        assert self.forecaster is not None
        made = rule_output(self.forecaster, run, []).forecast
        return None if made is None else made.predicted

    def replay(self, run: RunView, budget: int | None = None) -> tuple[int | None, str]:
        """The step at which this policy would have stopped a recorded run (None: it runs to its end), and why."""
        for end in range(1, len(run.steps) + 1):
            stop, reason = self.should_stop(run.prefix(end), budget)
            if stop:
                return run.steps[end - 1], reason
        return None, ""

    def __repr__(self) -> str:
        return f"StoppingPolicy({self.settings()})"
