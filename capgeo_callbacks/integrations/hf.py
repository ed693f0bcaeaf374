r"""Hugging Face Trainer callback
============================

The Hugging Face adapter of the run session, for runs trained with ``transformers.Trainer``. ``transformers`` is
imported here, and this module is not imported by ``capgeo_callbacks`` itself, so capgeo works without it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from capgeo_callbacks.capture.batches import TARGETS_LOOKED_FOR, to_device
from capgeo_callbacks.capture.measuring import measuring
from capgeo_callbacks.capture.selectors import Selector, selector_name
from capgeo_callbacks.capture.unit import HiddenStateUnit, ProbeUnit, RankMeUnit
from capgeo_callbacks.detection import Alert, DetectionSettings, append_point
from capgeo_callbacks.integrations.hf_models import (
    MASK_KEY,
    check_model,
    check_probe_rows,
    has_targets,
    layer_globs,
    probe_batches,
    probe_pass,
    probe_selector,
    scores_answers,
    selected_rows,
)
from capgeo_callbacks.keys import ILDR, LOGPROB, PROBE_ACC, RANKME, TOKEN_ACC, VAL_ACC, VAL_LOSS
from capgeo_callbacks.rules import Rule, default_rules
from capgeo_callbacks.run.failures import WarnOnce, check_callable, check_positive_int, never_fails
from capgeo_callbacks.run.schedule import SCHEDULES, evaluation_steps
from capgeo_callbacks.run.session import Measurements, RunSession

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
    r"""Measure per-layer RankMe on a fixed probe set during ``transformers.Trainer`` training and feed the run
    session, which runs the rules, announces their alerts and writes ``capgeo_summary.json`` at the end.

    At the steps of :func:`~capgeo_callbacks.run.schedule.evaluation_steps` (``points`` over the budget; step 0 in
    ``on_train_begin``, the others in ``on_step_end``, whatever the Trainer's ``eval_strategy``), one forward pass
    over the probe rows (:func:`~capgeo_callbacks.integrations.hf_models.probe_pass`) gives RankMe of every hidden
    state (``embed``, ``layers.i``, ``layers.{L-1}+final_norm``) and, with targets in the rows (Hugging Face's
    ``labels``, unshifted as the model takes them, or capgeo's ``targets`` + ``answer_mask``), ILDR of the same rows
    by their targets, ``val/acc`` (exact match of the target tokens), ``val/token_acc``, ``val/logprob``, ``val/loss``
    (the model's loss on the rows) and a linear probe per layer on the positions that predict a target (``acc_fn``
    gives the accuracy instead; without targets or ``acc_fn`` it is NaN, never acquired). It runs in eval mode
    without gradients and with the RNG forked: training ends at bit-identical weights. Each measurement is a log
    event at its step (:mod:`~capgeo_callbacks.integrations.hf_loggers`): in ``state.log_history`` and the ``on_log``
    of every ``report_to`` integration and user callback; text, images, the layout and hparams reach TensorBoard,
    MLflow and W&B; the Trainer's bar shows the run's figures. A resumed run rebuilds its series from the log history.

    Logged keys (``train/<key>`` in TensorBoard and W&B): ``rankme/``, ``ildr/``, ``probe_acc/``, ``rankme_early/``
    and ``rankme_floor/<layer>``, ``val/acc``, ``val/token_acc``, ``val/logprob``, ``val/loss``, ``forecast/<rule>``,
    ``capgeo/alerts_raised``; text ``capgeo/alerts`` and ``/verdict``, images ``capgeo/story`` and ``/rankme_heatmap``.

    Args:
        probe_rows: a dict of N-row tensors: ``input_ids`` (N, T), optionally ``attention_mask``, and ``labels``
            (as the model takes them: unshifted, -100 where nothing is predicted) or ``targets`` (the next token at
            each position) with ``answer_mask`` (true where the target is an answer token).
        layers: globs over the hidden-state labels; None for all.
        selector: token rows (docs/design.md, "RankMe rows"); default ``target`` (the positions that predict a
            target) when the rows hold targets, else ``last``.
        num_rows: selected rows per layer (default: every row the selector takes from the probe rows).
        settings: detection settings.
        eval_steps: the steps to measure at; default ``evaluation_steps(max_steps, points, schedule)``.
        points: evaluations over the budget.
        schedule: ``"geometric"`` or ``"linear"``.
        max_steps: the budget the schedule spans (default: the Trainer's ``state.max_steps``).
        acc_fn: ``acc_fn(model, rows) -> float``, the accuracy instead of the exact match.
        output_dir: where the summary goes (default: the Trainer's ``args.output_dir``).
        probes: also the linear probe accuracy per layer (rows with targets, ``target`` or ``answer`` selector; said
            once when the rows hold none).
        batch_size: probe rows per forward pass.
        on_alert: called with each :class:`~capgeo_callbacks.detection.Alert` when it is raised.
        run_info: run facts for the summary and the rules (task, seed, chance, ...); ``max_steps`` and
            ``warmup_steps`` default to the Trainer's (``state.max_steps``, ``args.get_warmup_steps``).
        rules: the rules run live (default: :func:`~capgeo_callbacks.rules.default_rules` on ``settings``).
        live_figures: also publish the story card where a rule first warns and where acquisition is confirmed.

    Raises:
        ValueError: on a bad argument; in ``on_train_begin`` if a layer pattern matches no hidden state or a probe
            token is outside the vocabulary.

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
                 live_figures: bool = True) -> None:
        rows = check_probe_rows(probe_rows)
        selector, patterns = probe_selector(rows, selector), layer_globs(layers)
        if num_rows is None:
            num_rows = max(2, selected_rows(rows, selector))
        _check_arguments(num_rows, points, batch_size, max_steps, schedule, eval_steps, acc_fn)
        self.probe_rows, self.layers, self.selector, self.num_rows = rows, patterns, selector, num_rows
        self.points, self.schedule, self.max_steps = points, schedule, max_steps
        self.acc_fn, self.output_dir = acc_fn, output_dir
        self.probes = (bool(probes) and has_targets(rows) and selector in ("target", "answer")
                       and num_rows >= ProbeUnit.min_rows)
        self._probes_wanted, self.batches = bool(probes), probe_batches(rows, batch_size)
        chosen = rules is not None
        rules = default_rules(settings) if rules is None else rules
        self.session = RunSession(rules, settings, run_info, monitor=ACC_KEY, logprob_key=LOGPROB,
                                  token_acc_key=TOKEN_ACC, on_alert=on_alert, live_figures=live_figures,
                                  warn=WarnOnce("CapgeoTrainerCallback", logging.getLogger("capgeo").warning),
                                  rules_chosen=chosen)
        self.units = _units(selector, num_rows, self.probes, self.session.warn)
        self.series: dict[str, list[list[float]]] = {}  # tag -> [[step, value], ...]: what this callback measures
        self.rows: dict[str, int] = {}
        self._scheduled = frozenset(eval_steps or ())
        self._budget = max_steps if max_steps is not None else (max(eval_steps) if eval_steps else None)
        self._handler: CallbackHandler | None = None  # the Trainer's: attach(trainer), else read in on_train_begin
        self._parameters = 0

    def attach(self, trainer: Trainer) -> Trainer:
        """Bind to ``trainer`` (added to its callbacks if missing): its loggers get the measurements. Returns it."""
        self._handler = bind(self, trainer)
        return trainer

    steps = property(lambda self: list(self.session.view.steps), doc="The steps measured so far.")
    acc = property(lambda self: self.session.acc)
    alerts = property(lambda self: self.session.alerts)
    summary = property(lambda self: self.session.summary)

    def measurements(self) -> Measurements:
        selectors = {RANKME[:-1]: selector_name(self.selector),
                     **({PROBE_ACC[:-1]: selector_name(self.selector)} if self.probes else {})}
        return Measurements(self.series, self.rows, selectors, self._parameters or None, _left_out(self.units))

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: nn.Module | None = None, **kwargs: Any) -> None:
        check_model(model, self.layers, self.probe_rows["input_ids"])  # raises before any update
        self._handler = attach(self, self._handler)
        self._parameters = sum(p.numel() for p in model.parameters())
        self.session.is_zero = bool(state.is_world_process_zero)
        if self._probes_wanted and not self.probes:
            self.session.warn("probes-hf", _no_probes(self.probe_rows, self.selector))
        if not self._scheduled:
            _schedule(self, state)
        _add_run_facts(self.session, args, int(state.max_steps or 0) or self._budget)
        if state.global_step > 0 and not self.session.view.steps:
            _restore(self, state)
        if state.global_step in self._scheduled:
            self._measure_at(args, state, control, {"model": model, **kwargs})

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    model: nn.Module | None = None, **kwargs: Any) -> None:
        if model is not None and state.global_step in self._scheduled:
            self._measure_at(args, state, control, {"model": model, **kwargs})

    @never_fails
    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        publisher = TrainerLogs(self._handler, self, args, state, control, kwargs, {}, self.session.warn)
        self.session.finish(self.measurements(), state.global_step, publisher,
                            directory=self.output_dir or args.output_dir)

    def build_summary(self, state: TrainerState | None = None) -> dict[str, Any]:
        """The run summary from the series measured so far."""
        return self.session.build_summary(self.measurements(), state.global_step if state is not None else None)

    @never_fails
    def _measure_at(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    event: dict[str, Any]) -> None:
        step, model = int(state.global_step), event["model"]
        if self.session.view.step == step:
            return  # measured at this step already (on_train_begin of a run resumed at a scheduled step)
        device = str(next(model.parameters()).device)
        with measuring(model):
            logged, scalars = self.measure(model, device)
            if self.acc_fn is not None:
                scalars[ACC_KEY] = float(self.acc_fn(model, to_device(self.probe_rows, device)))
        if ACC_KEY not in scalars:
            self.session.warn("no-acc", NO_ACC)
        for tag, value in logged.items():
            append_point(self.series.setdefault(tag, []), step, value)
        acc = scalars.pop(ACC_KEY, float("nan"))
        publisher = TrainerLogs(self._handler, self, args, state, control, event, {**logged, ACC_KEY: acc, **scalars},
                                self.session.warn)
        self.session.start(publisher, list(logged))
        self.session.evaluate(step, acc, scalars, self.measurements(), publisher, max_steps=self._budget)
        publisher.log()  # one log event at this step: the log history, and every logger of the Trainer
        publisher.progress(self.session.view.progress())

    def measure(self, model: nn.Module, device: str) -> tuple[dict[str, float], dict[str, float]]:
        """The units' values by tag, and the answer's scores, on the probe rows (in eval mode, without gradients)."""
        scalars, _ = probe_pass(model, self.batches, self.units, layers=self.layers, device=device, mask_key=MASK_KEY,
                                score=scores_answers(self.probe_rows), warn=self.session.warn)
        computed = [unit.compute() for unit in self.units]
        self.rows.update({tag: rows for one in computed for tag, rows in one.rows.items()})
        return {tag: value for one in computed for tag, value in one.values.items()}, scalars


def _schedule(callback: CapgeoTrainerCallback, state: TrainerState) -> None:
    """The budget and the steps to measure at, where ``eval_steps`` did not give them."""
    budget = callback.max_steps if callback.max_steps is not None else int(state.max_steps or 0)
    if budget < 1:
        raise ValueError("CapgeoTrainerCallback needs a budget: pass eval_steps=[...] or max_steps=N, or "
                         "give the Trainer max_steps / num_train_epochs")
    callback._budget = budget
    callback._scheduled = frozenset(evaluation_steps(budget, callback.points, callback.schedule))


def _add_run_facts(session: RunSession, args: TrainingArguments | None, budget: int) -> None:
    """The budget and the warm-up, known before the run: the rules read them live (a run_info given wins)."""
    known = {"max_steps": budget, "warmup_steps": args.get_warmup_steps(budget) if args is not None else None}
    session.add_run_info({key: value for key, value in known.items()
                          if value is not None and session.run_info.get(key) is None})


def _restore(callback: CapgeoTrainerCallback, state: TrainerState) -> None:
    """A resumed run's series, from the entries ``callback`` added to ``state.log_history``."""
    for entry in state.log_history:  # replayed through the session: the alerts raised before are not announced
        if ACC_KEY not in entry or "step" not in entry:
            continue
        step = int(entry["step"])
        for tag in [key for key in entry if key.startswith((RANKME, ILDR, PROBE_ACC))]:
            append_point(callback.series.setdefault(tag, []), step, float(entry[tag]))
        scalars = {key: float(entry[key]) for key in (LOGPROB, TOKEN_ACC, VAL_LOSS) if key in entry}
        callback.session.restore(step, float(entry[ACC_KEY]), scalars, Measurements(callback.series))


def _units(selector: Selector, num_rows: int, probes: bool, warn: WarnOnce) -> list[HiddenStateUnit]:
    """The measuring units the Lightning monitors drive (RankMe, and probes), fed here by one forward pass over the
    probe rows."""
    units: list[HiddenStateUnit] = [RankMeUnit(selector, num_rows, mask_key=MASK_KEY, warn=warn)]
    return units + ([ProbeUnit(selector, num_rows, mask_key=MASK_KEY, warn=warn)] if probes else [])


def _left_out(units: Sequence[HiddenStateUnit]) -> dict[str, str]:
    """The measures the units left out for lack of their inputs, with why (the summary's ``measures_left_out``)."""
    return {prefix: why for unit in units for prefix, why in unit.left_out.items()}


def _check_arguments(num_rows: int, points: int, batch_size: int, max_steps: int | None, schedule: str,
                     eval_steps: Sequence[int] | None, acc_fn: AccFn | None) -> None:
    for name, value, minimum in (("num_rows", num_rows, 2), ("points", points, 1), ("batch_size", batch_size, 1),
                                 *([("max_steps", max_steps, 1)] if max_steps is not None else [])):
        check_positive_int(name, value, minimum)
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown evaluation schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")
    if eval_steps is not None and (not eval_steps or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in eval_steps)):
        raise ValueError(f"eval_steps must be non-negative integers, got {eval_steps!r}")
    check_callable("acc_fn", acc_fn, "(model, rows) -> float")


def _no_probes(rows: Mapping[str, Tensor], selector: Selector) -> str:
    """Why probes asked for cannot run on these rows, and what to pass."""
    if not has_targets(rows):
        return (f"no probes: the probe rows hold no targets (looked for {TARGETS_LOOKED_FOR}); pass probe_rows with "
                "'labels'")
    return f"no probes: selector {selector_name(selector)!r} takes rows without labels; use 'target' or 'answer'"
