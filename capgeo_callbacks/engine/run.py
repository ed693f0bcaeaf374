r"""The run engine
==============

One run's capgeo, whatever trains it: the run's :class:`~capgeo_callbacks.run.session.RunSession` (the record, the
rules, announcing, publishing, the summary), the measures that feed it, the overhead budget over them and the
training loss between evaluations. The Lightning callbacks and the Hugging Face callback are adapters: each builds or
joins one engine and hands it what its framework gives (the accuracy, the scalars, the measures' values), so a run
gives the same alerts, forecasts and summary whichever framework trained it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from capgeo_callbacks.capture.measuring import measuring
from capgeo_callbacks.capture.unit import HiddenStateUnit
from capgeo_callbacks.detection.settings import DetectionSettings
from capgeo_callbacks.engine.hidden import HiddenStateMeasure
from capgeo_callbacks.engine.measure import Measure, ModelMeasure
from capgeo_callbacks.keys import LR, RANKME, TRAIN_LOSS
from capgeo_callbacks.publish.publisher import Publisher
from capgeo_callbacks.rules import Rule, default_rules
from capgeo_callbacks.run.budget import FIXED
from capgeo_callbacks.run.failures import WarnOnce
from capgeo_callbacks.run.session import Measurements, RunSession
from capgeo_callbacks.run.tracker import TrackerUpdate

__all__ = ["PASS_WORK", "RunEngine", "TrainingLoss"]

PASS_WORK = "measuring pass"  # the forward pass of an evaluation the engine drives: fixed work of the budget


class RunEngine:
    """One run's session and the measures that feed it (module docstring).

    Args:
        session: the run's session.
        measures: the measures feeding it, in the order their series are given (more join with :meth:`add`).
    """

    def __init__(self, session: RunSession, measures: Sequence[Measure] = ()) -> None:
        self.session = session
        self.measures: list[Measure] = []
        for measure in measures:
            self.add(measure)
        self.losses = TrainingLoss()

    @classmethod
    def build(cls, rules: Sequence[Rule] | None, settings: DetectionSettings | None, run_info: Mapping[str, Any] | None,
              *, owner: str, rankme_prefix: str = RANKME, warn: Callable[[str], Any] | None = None,
              **options: Any) -> RunEngine:
        """An engine on a new session: ``rules`` (None: :func:`~capgeo_callbacks.rules.default_rules` on
        ``settings``, one left out for lack of its inputs then a line in the log, not a warning), problems said once
        under ``owner``'s name (through ``warn``, default a warning), ``options`` the session's."""
        chosen = rules is not None
        rules = default_rules(settings, rankme_prefix) if rules is None else rules
        return cls(RunSession(rules, settings, run_info, rankme_prefix=rankme_prefix, warn=WarnOnce(owner, warn),
                              rules_chosen=chosen, **options))

    def add(self, measure: Measure) -> None:
        """A measure feeding this run (once, however often it is added)."""
        if not any(one is measure for one in self.measures):
            self.measures.append(measure)

    @property
    def tags(self) -> list[str]:
        """Every measure's tags, in the measures' order."""
        return [tag for measure in self.measures for tag in measure.tags]

    def start(self, publisher: Publisher, horizon: int | None = None, stop: int | None = None) -> None:
        """The start of training: the dashboard's layout published once per run and, under an overhead budget, the
        budget handed to every measure (a rule input where the run's rules read its tags), its protected start counted
        over ``horizon`` steps (the run's, projected to ``stop``, where this part of it stops), and its clock
        started."""
        self.session.start(publisher, self.tags)
        budget = self.session.budget
        if budget is not None:
            budget.horizon, budget.stop = horizon, stop
            for measure in self.measures:
                measure.use_budget(budget, rule_input=self.session.reads(measure.tags))
            budget.start()

    def measurements(self, parameters: int | None = None) -> Measurements:
        """What the measures hold: every series by tag (each measure's in its layer order), the rows each was
        measured on, each hidden-state measure's token selector, the measures left out, and ``parameters``."""
        series: dict[str, list[list[float]]] = {}
        rows: dict[str, int] = {}
        selectors: dict[str, str] = {}
        left_out: dict[str, str] = {}
        for measure in self.measures:
            left_out.update(measure.left_out)
            ordered = [tag for tag in measure.tags if tag in measure.series]
            ordered += [tag for tag in measure.series if tag not in ordered]
            series.update({tag: measure.series[tag] for tag in ordered})
            rows.update(measure.rows)
            if measure.selector_name:
                selectors[measure.prefix] = measure.selector_name
        return Measurements(series, rows, selectors, parameters, left_out)

    def record(self, step: int, values: Mapping[str, float]) -> dict[str, float]:
        """``values`` at ``step`` appended to the series of the measures they belong to (a resumed run's logged
        values, or values measured for them); returns the finite ones recorded."""
        recorded: dict[str, float] = {}
        for measure in self.measures:
            own = {tag: value for tag, value in values.items() if measure.owns(tag) and tag not in recorded}
            recorded.update(measure.add_values(step, own) if own else {})
        return recorded

    def measure(self, model: nn.Module, step: int,
                run_pass: Callable[[Sequence[HiddenStateUnit]], dict[str, float]]) -> tuple[dict[str, float],
                                                                                            dict[str, float]]:
        """An evaluation the engine drives itself, where no framework pass is there to ride on (a Hugging Face
        Trainer): the measures due at ``step`` (each asked once), those of the model first, then ``run_pass(units)``,
        a forward pass feeding the due hidden-state measures' units, which returns the scores it made (fixed work of
        the overhead budget: it gives the accuracy). In eval mode, without gradients but where a gradient measure
        takes them, the RNG forked (training is unchanged). Returns the values by tag (not yet recorded:
        :meth:`record`) and the scores."""
        due = [measure for measure in self.measures if measure.due(step)]
        hidden = [measure for measure in due if isinstance(measure, HiddenStateMeasure)]
        values: dict[str, float] = {}
        if self.session.budget is not None:
            self.session.budget.add_work(PASS_WORK, FIXED)
        with measuring(model):
            for measure in due:
                if isinstance(measure, ModelMeasure):
                    with measure.timed():
                        values.update(measure.measure_model(model, step))
            with self.session.timing(PASS_WORK):
                scores = run_pass([measure.unit for measure in hidden])
            for measure in hidden:
                values.update(measure.conclude(step))
        return values, scores

    def scalars(self, logged: Mapping[str, Any], prefixes: Sequence[str], lr: float | None) -> dict[str, float]:
        """What an evaluation records beside the accuracy: the ``logged`` scalars under ``prefixes`` (and those the
        session names: the log-prob, the per-token accuracy, the loss) but the monitor, the mean training loss since
        the previous evaluation (:attr:`losses`) and the learning rate ``lr``."""
        keys, named = self.session.keys, set(self.session.keys.renamed)
        scalars = {tag: float(value) for tag, value in logged.items()
                   if tag != keys.monitor and (tag.startswith(tuple(prefixes)) or tag in named)}
        loss = self.losses.mean()
        if loss is not None:
            scalars[TRAIN_LOSS] = loss
        if lr is not None:
            scalars[LR] = lr
        return scalars

    def evaluate(self, step: int, acc: float, scalars: Mapping[str, float] | None, publisher: Publisher, *,
                 max_steps: int | None = None, parameters: int | None = None) -> TrackerUpdate:
        """One evaluation: the accuracy, ``scalars`` and the measures' series to the session, which runs the rules
        and announces and publishes what they say."""
        return self.session.evaluate(step, acc, scalars, self.measurements(parameters), publisher,
                                     max_steps=max_steps)

    def finish(self, steps: int | None, publisher: Publisher, directory: Any, parameters: int | None = None
               ) -> dict[str, Any]:
        """The run's end: the summary, written once into ``directory``, and what the session publishes then."""
        return self.session.finish(self.measurements(parameters), steps, publisher, directory)

    def state_dict(self) -> dict[str, Any]:
        return {**self.session.state_dict(), "loss_since_evaluation": list(self.losses.totals())}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.session.load_state_dict(state)
        self.losses.load(state.get("loss_since_evaluation", [0.0, 0]))


class TrainingLoss:
    """The mean training loss since the previous evaluation, kept as tensors between evaluations: no device sync in a
    training step (a sum of each 64 on the device, read on the host only at an evaluation or a checkpoint)."""

    def __init__(self) -> None:
        self._sum, self._count = 0.0, 0
        self._pending: list[torch.Tensor] = []
        self._chunks: list[tuple[torch.Tensor, torch.Tensor]] = []

    def add(self, loss: Any) -> None:
        """A training step's loss (a one-element tensor; anything else is not a loss and is passed over)."""
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            self._pending.append(loss.detach())
            if len(self._pending) >= 64:  # bounded memory: summed on the device, nothing read back
                self._chunks.append(_finite_sum(self._pending))
                self._pending = []

    def totals(self) -> tuple[float, int]:
        """The sum and the count of the finite losses since the previous evaluation, read on the host."""
        if self._pending:
            self._chunks.append(_finite_sum(self._pending))
            self._pending = []
        for total, count in self._chunks:
            self._sum += float(total)
            self._count += int(count)
        self._chunks = []
        return self._sum, self._count

    def mean(self) -> float | None:
        """The mean since the previous evaluation (None: no loss), and a new interval started."""
        total, count = self.totals()
        self._sum, self._count = 0.0, 0
        return total / count if count else None

    def load(self, totals: Sequence[Any]) -> None:
        self._sum, self._count = float(totals[0]), int(totals[1])
        self._pending, self._chunks = [], []


def _finite_sum(losses: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The sum and the count of the finite ``losses``, on their device. In float64: the sum of float32 losses is
    then exact, so a run resumed mid-interval adds up the same."""
    values = torch.stack([value.double().reshape(()) for value in losses])
    finite = torch.isfinite(values)
    return torch.where(finite, values, 0.0).sum(), finite.sum()

