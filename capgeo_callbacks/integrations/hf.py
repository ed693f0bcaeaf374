r"""Hugging Face Trainer callback
============================

The Hugging Face adapter of the run engine (:mod:`capgeo_callbacks.engine`), for runs trained with
``transformers.Trainer``: the same measures (from the measure registry, the gradient ones included), the same overhead
budget, session and outputs as a Lightning run, fed from the Trainer's events. ``transformers`` is imported here, and
this module is not imported by ``capgeo_callbacks`` itself, so capgeo works without it.

At the steps of :func:`~capgeo_callbacks.run.schedule.evaluation_steps` (``points`` over the budget; step 0 in
``on_train_begin``, the others in ``on_step_end``, whatever the Trainer's ``eval_strategy``) the callback measures what
``measures`` names from the registry, each at its registered cadence: the hidden-state measures (RankMe, ILDR, the
linear probes, a registered measure of one's own) from one forward pass over the probe rows
(:func:`~capgeo_callbacks.integrations.hf_models.probe_pass`; hidden states ``embed``, ``layers.i``,
``layers.{L-1}+final_norm``), the parameters' norm, and the gradient measures (``default,commutator``, ``all``) on a
fixed batch of the training set's first examples, collated by the Trainer's collator, with the model's own loss
(``output.loss``). The pass also scores the rows with targets (Hugging Face's ``labels``, unshifted, or capgeo's
``targets`` + ``answer_mask``): ``val/acc`` (exact match; ``acc_fn`` instead; NaN without either, never acquired),
``val/token_acc``, ``val/logprob``, ``val/loss``. Everything runs in eval mode with the RNG forked: training ends at
bit-identical weights. The overhead budget holds capgeo's time as on Lightning, the pass being fixed work. Each
measurement is a log event at its step (:mod:`~capgeo_callbacks.integrations.hf_loggers`): in ``state.log_history``
and the ``on_log`` of every ``report_to`` integration and user callback; text, images, the layout and hparams reach
TensorBoard, MLflow and W&B. A resumed run rebuilds its series from the log history.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from capgeo_callbacks.capture.selectors import Selector
from capgeo_callbacks.detection import Alert, DetectionSettings
from capgeo_callbacks.engine.gradient import GradientMeasure
from capgeo_callbacks.engine.measure import ModelMeasure
from capgeo_callbacks.engine.run import RunEngine
from capgeo_callbacks.integrations.hf_models import (
    ProbeRows,
    check_model,
    hf_forward,
    hf_loss,
    hf_measures,
    matched_labels,
    training_examples,
    watch_labels,
)
from capgeo_callbacks.keys import LOGPROB, TOKEN_ACC, VAL_ACC, VAL_LOSS
from capgeo_callbacks.rules import Rule
from capgeo_callbacks.run.budget import DEFAULT_OVERHEAD_BUDGET, OverheadSetting
from capgeo_callbacks.run.failures import never_fails
from capgeo_callbacks.run.schedule import Schedule

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
    from transformers.trainer_callback import CallbackHandler
except ImportError as err:  # pragma: no cover - the message is the point
    raise ImportError("capgeo_callbacks.integrations.hf needs transformers: pip install 'capgeo-callbacks[hf]' "
                      "(or pip install 'transformers>=4.40')") from err

if TYPE_CHECKING:
    from transformers import Trainer

# it imports transformers: after the check above
from capgeo_callbacks.integrations.hf_loggers import TrainerLogs, attach, bind

__all__ = ["ACC_KEY", "CapgeoTrainerCallback"]

ACC_KEY = VAL_ACC  # the accuracy the rules follow (the summary's ``monitor``), measured on the probe rows
NO_ACC = ("the probe rows hold no targets ('labels', or 'targets' + 'answer_mask') and no acc_fn was given: "
          "accuracy is NaN, so acquisition is never detected")
AccFn = Callable[[nn.Module, Mapping[str, Tensor]], float]
"""``acc_fn(model, rows) -> accuracy``: the model in eval mode under ``torch.no_grad``, rows on its device."""


class CapgeoTrainerCallback(TrainerCallback):
    r"""Run capgeo's measures and rules on a ``transformers.Trainer`` run: the engine a Lightning run has, fed from the
    Trainer's events at the schedule's steps, measuring the hidden states on a fixed set of probe rows (module
    docstring).

    Logged keys (``train/<key>`` in TensorBoard and W&B): the measures' (docs/measures.md), ``val/acc``,
    ``val/token_acc``, ``val/logprob``, ``val/loss``, and the detector's (:class:`~capgeo_callbacks.PrecursorDetector`).

    The rows are measured as :class:`~capgeo_callbacks.integrations.hf_models.ProbeRows` takes them (``layers``,
    ``selector``, ``num_rows``, ``probes``, ``batch_size``, ``acc_fn``), when
    :class:`~capgeo_callbacks.run.schedule.Schedule` says (``eval_steps``, ``points``, ``schedule``, ``max_steps``, by
    default the Trainer's), and the run's settings are a detector's (``settings``, ``rules``, ``on_alert``,
    ``run_info``, ``live_figures``, ``overhead_budget``: :class:`~capgeo_callbacks.PrecursorDetector`; ``max_steps``
    and ``warmup_steps`` of ``run_info`` default to the Trainer's).

    Args:
        probe_rows: a dict of N-row tensors: ``input_ids`` (N, T), optionally ``attention_mask``, and ``labels``
            (as the model takes them: unshifted, -100 where nothing is predicted) or ``targets`` (the next token at
            each position) with ``answer_mask`` (true where the target is an answer token).
        output_dir: where the summary goes (default: the Trainer's ``args.output_dir``).
        measures: registered measures, as ``train.py --measures`` takes them (``"default"``, ``"default,commutator"``).
        measure_options: constructor arguments of each measure by name, over the registry's.

    Raises:
        ValueError: on a bad argument; in ``on_train_begin`` if a layer pattern matches no hidden state, a probe token
            is outside the vocabulary, or no budget is known.

    Example::

        callback = CapgeoTrainerCallback({"input_ids": ids, "labels": labels})  # a fixed set of validation rows
        callback.attach(Trainer(model=model, args=args, train_dataset=train)).train()
    """

    def __init__(self, probe_rows: Mapping[str, Tensor], layers: str | Sequence[str] | None = None,
                 selector: Selector | None = None, num_rows: int | None = None,
                 settings: DetectionSettings | None = None,
                 eval_steps: Sequence[int] | None = None, points: int = 256, schedule: str = "geometric",
                 max_steps: int | None = None, acc_fn: AccFn | None = None, output_dir: str | Path | None = None,
                 probes: bool = True, batch_size: int = 64, on_alert: Callable[[Alert], Any] | None = None,
                 run_info: Mapping[str, Any] | None = None, rules: Sequence[Rule] | None = None,
                 live_figures: bool = True, *, measures: str | Sequence[str] = "default",
                 measure_options: Mapping[str, Mapping[str, Any]] | None = None,
                 overhead_budget: OverheadSetting = DEFAULT_OVERHEAD_BUDGET) -> None:
        self.probe = ProbeRows(probe_rows, layers, selector, num_rows, batch_size, probes, acc_fn)
        self.plan = Schedule(eval_steps, max_steps=max_steps, points=points, schedule=schedule, name="eval_steps")
        self.output_dir = output_dir
        self.engine = RunEngine.build(rules, settings, run_info, owner="CapgeoTrainerCallback",
                                      warn=logging.getLogger("capgeo").warning, monitor=ACC_KEY, logprob_key=LOGPROB,
                                      token_acc_key=TOKEN_ACC, on_alert=on_alert, live_figures=live_figures,
                                      overhead_budget=overhead_budget)
        self.session = self.engine.session
        for measure in hf_measures(measures, measure_options, self.probe):
            self.engine.add(measure)
        self._handler: CallbackHandler | None = None  # the Trainer's: attach(trainer), else read in on_train_begin
        self._parameters = 0

    def attach(self, trainer: Trainer) -> Trainer:
        """Bind to ``trainer`` (added to its callbacks if missing): its loggers get the measurements. Returns it."""
        self._handler = bind(self, trainer)
        return trainer

    # the probe rows' settings, read through
    selector, num_rows = property(lambda self: self.probe.selector), property(lambda self: self.probe.num_rows)
    probes = property(lambda self: self.probe.probes)
    steps = property(lambda self: list(self.session.view.steps), doc="The steps measured so far.")
    series = property(lambda self: dict(self.engine.measurements().series), doc="Every measured series, by tag.")
    rows = property(lambda self: dict(self.engine.measurements().rows), doc="The rows each tag was measured on.")
    acc = property(lambda self: self.session.acc)
    alerts = property(lambda self: self.session.alerts)
    summary = property(lambda self: self.session.summary)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: nn.Module | None = None, **kwargs: Any) -> None:
        check_model(model, self.probe.layers, self.probe.rows["input_ids"])  # raises before any update
        self._handler = attach(self, self._handler)
        self._parameters = sum(p.numel() for p in model.parameters())
        self.session.is_zero = bool(state.is_world_process_zero)
        if self.probe.probes_wanted and not self.probe.probes:
            self.session.warn("probes-hf", self.probe.why_no_probes())
        self.plan.fix(int(state.max_steps or 0) or None, "pass eval_steps=[...] or max_steps=N to "
                      "CapgeoTrainerCallback, or give the Trainer max_steps / num_train_epochs")
        _add_run_facts(self.session, args, int(state.max_steps or 0) or self.plan.budget)
        _prepare(self.engine.measures, model, matched_labels(model, self.probe.layers), kwargs.get("train_dataloader"))
        self.engine.start(TrainerLogs(self._handler, self, args, state, control, kwargs, {}, self.session.warn),
                          self.plan.budget, int(state.max_steps or 0) or self.plan.budget)  # the layout, the budget
        if state.global_step > 0 and not self.session.view.steps:
            _restore(self.engine, state)
        if state.global_step in self.plan:
            self._measure_at(args, state, control, {"model": model, **kwargs})

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    model: nn.Module | None = None, **kwargs: Any) -> None:
        if model is not None and state.global_step in self.plan:
            self._measure_at(args, state, control, {"model": model, **kwargs})

    @never_fails
    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        self.engine.finish(state.global_step, TrainerLogs(self._handler, self, args, state, control, kwargs, {},
                                                          self.session.warn),
                           self.output_dir or args.output_dir, self._parameters or None)

    def build_summary(self, state: TrainerState | None = None) -> dict[str, Any]:
        """The run summary from the series measured so far."""
        return self.session.build_summary(self.engine.measurements(self._parameters or None),
                                          state.global_step if state is not None else None)

    @never_fails
    def _measure_at(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    event: dict[str, Any]) -> None:
        step, model = int(state.global_step), event["model"]
        if self.session.view.step == step:
            return  # measured at this step already (on_train_begin of a run resumed at a scheduled step)
        values, scalars = self.measure(model, step)
        if ACC_KEY not in scalars:
            self.session.warn("no-acc", NO_ACC)
        acc, logged = scalars.pop(ACC_KEY, float("nan")), self.engine.record(step, values)
        publisher = TrainerLogs(self._handler, self, args, state, control, event, {**logged, ACC_KEY: acc, **scalars},
                                self.session.warn)
        self.engine.evaluate(step, acc, scalars, publisher, max_steps=self.plan.budget,
                             parameters=self._parameters or None)
        publisher.log()  # one log event at this step: the log history, and every logger of the Trainer
        publisher.progress(self.session.view.progress())

    def measure(self, model: nn.Module, step: int) -> tuple[dict[str, float], dict[str, float]]:
        """The values of the measures due at ``step`` by tag (not yet recorded), and the answer's scores from the pass
        over the probe rows (:meth:`~capgeo_callbacks.engine.RunEngine.measure`)."""
        return self.engine.measure(model, step, lambda units: self.probe.scores(model, units, self.session.warn))


def _prepare(measures: Sequence[Any], model: nn.Module, labels: Sequence[str], loader: Any) -> None:
    """Before the first evaluation: the hidden-state measures watch ``labels``, the others their modules of ``model``,
    and the gradient measures take the model's own loss (where none was given) and their fixed batch, the first
    examples of the training set."""
    watch_labels(measures, labels)
    gradient = [measure for measure in measures if isinstance(measure, GradientMeasure)]
    examples = training_examples(loader, max((m.num_examples for m in gradient), default=0)) if gradient else None
    for measure in measures:
        if isinstance(measure, ModelMeasure):
            measure.watch(model)
        if isinstance(measure, GradientMeasure):
            measure.use_loss(hf_loss, hf_forward)
            if examples is not None and measure.caching:
                measure.cache(examples)


def _add_run_facts(session: Any, args: TrainingArguments | None, budget: int | None) -> None:
    """The budget and the warm-up, known before the run: the rules read them live (a run_info given wins)."""
    known = {"max_steps": budget, "warmup_steps": args.get_warmup_steps(budget) if args is not None and budget
             else None}
    session.add_run_info({key: value for key, value in known.items()
                          if value is not None and session.run_info.get(key) is None})


def _restore(engine: RunEngine, state: TrainerState) -> None:
    """A resumed run's series and each measure's count of evaluations, from the entries the callback added to
    ``state.log_history`` (replayed through the session: the alerts raised before are not announced again)."""
    entries = [entry for entry in state.log_history if ACC_KEY in entry and "step" in entry]
    for entry in entries:
        step = int(entry["step"])
        engine.record(step, {key: float(value) for key, value in entry.items() if isinstance(value, (int, float))})
        scalars = {key: float(entry[key]) for key in (LOGPROB, TOKEN_ACC, VAL_LOSS) if key in entry}
        engine.session.restore(step, float(entry[ACC_KEY]), scalars, engine.measurements())
    for measure in engine.measures:
        measure.evaluations = len(entries)
