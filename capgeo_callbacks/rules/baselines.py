"""Baseline warning rules: what a researcher could compute from the loss curve and a clock, to hold the
geometry rules against. All chance-aware where the run records its chance level, all on the same clock from
step 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from capgeo_callbacks.detection.alerts import Alert
from capgeo_callbacks.detection.labels import Chance
from capgeo_callbacks.detection.onset import learning_onset
from capgeo_callbacks.keys import ACC, LOGPROB, PROBE_ACC, VAL_LOSS
from capgeo_callbacks.rules.base import Needs, Rule, RuleOutput, RunView

__all__ = ["ClockRule", "LogprobEmergenceRule", "LossOnsetRule", "ProbeCrossingRule", "WarmupEndRule"]


def run_chance(run: RunView) -> Chance | None:
    values = run.info.get("chance")
    return Chance.from_dict(values) if values else None


class LossOnsetRule(Rule):
    """Warns at learning onset (:func:`~capgeo_callbacks.detection.onset.learning_onset`): the answer log-prob
    (minus ``val/loss`` where the run records no log-prob) leaves the level of an answer that ignores the question.
    The loss-only baseline."""

    name = "loss-onset"

    def __init__(self, logprob_key: str = LOGPROB) -> None:
        self.logprob_key = logprob_key

    @property
    def needs(self) -> Needs:  # type: ignore[override]
        return Needs(series=(ACC, f"{self.logprob_key}|{VAL_LOSS}"))

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        if raised:
            return RuleOutput()
        onset = learning_onset(run.steps, run.logprob(self.logprob_key), run_chance(run), run.warmup_steps or 0)
        if onset is None:
            return RuleOutput()
        return RuleOutput(alerts=[self.alert(run, f"the answer log-prob left its chance level at step {onset}")])

    def settings(self) -> dict[str, Any]:
        return {"logprob_key": self.logprob_key}


class ClockRule(Rule):
    """Warns at a fixed share of the budget (or a fixed step), whatever the run does."""

    name = "clock"

    def __init__(self, fraction: float | None = 0.2, step: int | None = None, name: str | None = None) -> None:
        if (fraction is None) == (step is None):
            raise ValueError("give exactly one of fraction (of the budget) or step")
        self.fraction, self.at_step = fraction, step
        if name:
            self.name = name

    @property
    def needs(self) -> Needs:  # type: ignore[override]
        return Needs(facts=("max_steps",) if self.at_step is None else ())

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        due = self.at_step if self.at_step is not None else (self.fraction or 0) * (run.max_steps or math.inf)
        if raised or run.step < due:
            return RuleOutput()
        return RuleOutput(alerts=[self.alert(run, f"the clock reached step {due:g}")])

    def settings(self) -> dict[str, Any]:
        return {"fraction": self.fraction, "step": self.at_step, "name": self.name}


class WarmupEndRule(Rule):
    """Warns at the end of the learning-rate warm-up: what an alert on the warm-up's RankMe dip amounts to.
    Never on a run that records no ``warmup_steps``: it has no warm-up end to ring at."""

    name = "warmup-end"
    needs = Needs(facts=("warmup_steps",))

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        end = run.warmup_steps
        if raised or end is None or run.step < end:
            return RuleOutput()
        return RuleOutput(alerts=[self.alert(run, f"the learning-rate warm-up ended at step {end}")])


class LogprobEmergenceRule(Rule):
    """Warns when the mean answer log-prob (minus ``val/loss`` where the run records none) reaches ``threshold``
    (log 0.5 by default)."""

    name = "logprob-emergence"

    def __init__(self, threshold: float = math.log(0.5), logprob_key: str = LOGPROB) -> None:
        self.threshold, self.logprob_key = threshold, logprob_key

    @property
    def needs(self) -> Needs:  # type: ignore[override]
        return Needs(series=(ACC, f"{self.logprob_key}|{VAL_LOSS}"))

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        value = run.logprob(self.logprob_key)[-1] if run.steps else math.nan
        if raised or not value >= self.threshold:
            return RuleOutput()
        return RuleOutput(alerts=[self.alert(run, f"the answer log-prob reached {value:.3f}")])

    def settings(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "logprob_key": self.logprob_key}


class ProbeCrossingRule(Rule):
    """Warns when any layer's linear probe reads the answer tokens ``share`` of the way from chance (the answer
    marginal's per-token accuracy; 0 if unknown) to perfect."""

    name = "probe-crossing"

    def __init__(self, share: float = 0.5, probe_prefix: str = PROBE_ACC) -> None:
        if not 0 < share < 1:
            raise ValueError(f"share must be in (0, 1), got {share}")
        self.share, self.probe_prefix = share, probe_prefix

    @property
    def needs(self) -> Needs:  # type: ignore[override]
        return Needs(series=(ACC, f"{self.probe_prefix}*"))

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        chance = run_chance(run)
        level = (chance.token_acc if chance else 0.0) + self.share * (1 - (chance.token_acc if chance else 0.0))
        above = [tag for tag in run.tags(self.probe_prefix) if run.last(tag) >= level]
        if raised or not above:
            return RuleOutput()
        return RuleOutput(alerts=[self.alert(run, f"probe {above[0]} reached {run.last(above[0]):.3f} "
                                                  f"(level {level:.3f})", layer=above[0][len(self.probe_prefix):])])

    def settings(self) -> dict[str, Any]:
        return {"share": self.share, "probe_prefix": self.probe_prefix}
