r"""Hugging Face Trainer callback
============================

Per-layer RankMe, probe accuracy and precursor alerts for runs trained with ``transformers.Trainer`` instead
of Lightning: the same measurement as offline analysis of Hugging Face revisions
(:func:`~capgeo_callbacks.offline.measure_hf.measure_hf`), the same detection
(:func:`~capgeo_callbacks.detection.scan_alerts`) and the same summary
(:func:`~capgeo_callbacks.run.summary.build_summary`). ``transformers`` is imported here, and this module is
not imported by ``capgeo_callbacks`` itself, so capgeo works without it.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

from capgeo_callbacks.capture.batches import to_device
from capgeo_callbacks.capture.layers import glob_match
from capgeo_callbacks.capture.selectors import ANSWER_SELECTORS, Selector, selector_name, validate_selector
from capgeo_callbacks.detection import Alert, DetectionSettings
from capgeo_callbacks.offline.measure_hf import TARGET_KEY, hf_layer_labels, measure_hf
from capgeo_callbacks.offline.measured import WarningLog
from capgeo_callbacks.offline.probe_sets import ProbeSet
from capgeo_callbacks.rules import Rule
from capgeo_callbacks.run.failures import append_point, check_positive_int, never_fails
from capgeo_callbacks.run.schedule import SCHEDULES, evaluation_steps
from capgeo_callbacks.run.summary import SUMMARY_FILENAME, alert_message, write_summary
from capgeo_callbacks.run.tracker import RunTracker

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError as err:  # pragma: no cover - the message is the point
    raise ImportError("capgeo_callbacks.integrations.hf needs transformers: pip install 'capgeo-callbacks[hf]' "
                      "(or pip install 'transformers>=4.40')") from err

__all__ = ["ACC_KEY", "LOGPROB_KEY", "CapgeoTrainerCallback"]

log = logging.getLogger("capgeo")

MASK_KEY = "answer_mask"
# the names the Lightning callbacks log too, so a summary has the same keys whichever callback wrote it
ACC_KEY = "val/acc"  # the accuracy detection follows (the summary's ``monitor``), measured on the probe rows
LOGPROB_KEY = "val/logprob"
AccFn = Callable[[nn.Module, Mapping[str, Tensor]], float]
"""``acc_fn(model, rows) -> accuracy``: the model in eval mode under ``torch.no_grad``, the probe rows on
the model's device."""


class _Warnings(WarningLog):
    """Warnings once per key, on the ``capgeo`` logger (the signature ``measure_hf`` reports through)."""

    def __call__(self, key: str, message: str) -> None:
        if key in self._keys:
            return
        self._keys.add(key)
        self.messages.append(message)
        log.warning("CapgeoTrainerCallback: %s", message)


class CapgeoTrainerCallback(TrainerCallback):
    r"""Measure per-layer RankMe on a fixed probe set during ``transformers.Trainer`` training, raise
    precursor alerts live and write ``capgeo_summary.json`` at the end.

    **When.** At the steps of :func:`~capgeo_callbacks.run.schedule.evaluation_steps` (``points`` over the
    budget, step 0 included): step 0 in ``on_train_begin`` (the initialised model, before any update), the
    others in ``on_step_end`` after the optimizer step of that step. The schedule is a pure function of the
    budget, independent of the Trainer's own ``eval_strategy``, so runs with different evaluation settings
    are measured at the same steps (docs/design.md, "When to measure").

    **What.** One forward pass over the probe rows with ``output_hidden_states=True`` (the offline
    analysis's :func:`~capgeo_callbacks.offline.measure_hf.measure_hf`): RankMe of the first ``num_rows``
    selected rows of every hidden state, labelled ``embed``, ``layers.i`` and ``layers.{L-1}+final_norm``
    (Hugging Face returns the last hidden state after the final norm); with ``targets`` and
    ``answer_mask`` in the rows, the exact match of the whole answer (``val/acc``, the accuracy
    detection follows), the mean answer-token log-prob (``val/logprob``) and, with the ``answer``
    selector, a held-out linear probe per layer (``probe_acc/<layer>``). Without targets, ``acc_fn`` gives
    the accuracy; with neither, accuracy is NaN (counted as not acquired: alerts still fire, the verdict is
    ``not-acquired``).

    **No observer effect.** The measurement runs under ``torch.no_grad`` (inference mode) with every
    submodule in eval mode, restored afterwards, and the global RNG forked (iterating the probe loader
    draws from it), so training ends at bit-identical weights with or without this callback. Weights,
    gradients and the optimizer are never touched.

    **Alerts** (docs/design.md, "Detection"): after each measurement,
    :func:`~capgeo_callbacks.detection.scan_alerts` on the series so far; each new alert is a ``logging``
    warning on the ``capgeo`` logger (:func:`~capgeo_callbacks.run.summary.alert_message`) and
    ``on_alert(alert)`` if given.

    **Trainer logs.** A callback gets no Trainer object, and ``Trainer.log`` appends its entry to
    ``state.log_history`` before it calls the callbacks' ``on_log``, with the ``report_to`` integrations
    (TensorBoard, W&B, ...) ahead of user callbacks. So each measurement is appended to
    ``state.log_history`` itself, as ``Trainer.log`` does (``{key: value, ..., "step": step}``; saved in
    ``trainer_state.json`` with every checkpoint), and ``on_log`` adds the latest values to the ``logs``
    of the Trainer's next log call, which reaches the callbacks listed after this one (the progress bar
    or printer, and yours) but not the ``report_to`` integrations. A run resumed from a checkpoint
    rebuilds its series from ``state.log_history`` (the alerts already raised are not raised again).

    Under DDP every process measures the whole probe set on its identical replica (no collective); only
    the world process zero warns, calls ``on_alert`` and writes the summary. Failures inside a
    measurement are reported once as a warning and skipped; training goes on.

    Args:
        probe_rows: the fixed probe set, a dict of N-row tensors: ``input_ids`` (N, T) integers, and
            optionally ``attention_mask`` (N, T), ``targets`` (N, T, the next token at each position) with
            ``answer_mask`` (N, T, true where the target is an answer token).
        layers: globs over the hidden-state labels (``embed``, ``layers.*``,
            ``layers.5+final_norm``); None for all.
        selector: token rows (docs/design.md, "RankMe rows"): ``answer``, ``first_answer``,
            ``question_mean`` (these need ``answer_mask``), ``last``, ``mean``, ``all`` or a callable
            ``(hidden, batch) -> rows``. Default: ``answer`` when the rows have an ``answer_mask``, else
            ``last``.
        num_rows: selected rows per layer (RankMe is only comparable at equal N; the summary records it).
        settings: detection settings (default ``DetectionSettings()``).
        eval_steps: the steps to measure at; default ``evaluation_steps(max_steps, points, schedule)``.
        points: evaluations over the budget (about; see ``evaluation_steps``).
        schedule: ``"geometric"`` or ``"linear"``.
        max_steps: the budget the schedule spans (default: the Trainer's ``state.max_steps``).
        acc_fn: ``acc_fn(model, rows) -> float``, the accuracy detection follows, instead of the exact
            match (needed when the rows have no ``targets``).
        output_dir: where ``capgeo_summary.json`` goes (default: the Trainer's ``args.output_dir``).
        probes: also the linear probe accuracy per layer (only with the ``answer`` selector and
            ``targets`` + ``answer_mask`` in the rows).
        batch_size: probe rows per forward pass.
        on_alert: called with each :class:`~capgeo_callbacks.detection.Alert` when it is raised.
        run_info: fields stored at the top of the summary (task, model, seed, ...).
        rules: the rules run live (:mod:`capgeo_callbacks.rules`; default: the study's rule on ``settings``).

    Raises:
        ValueError: on a bad argument (the message names the valid choices); in ``on_train_begin``,
            before any update, if a layer pattern matches no hidden state or a probe token is outside the
            model's vocabulary.

    Logged keys (in ``state.log_history`` and the ``logs`` of the next ``on_log``):
        ``rankme/<layer>`` for each measured layer, ``probe_acc/<layer>`` where probes run,
        ``val/acc`` and ``val/logprob`` (on the probe rows) where measured, ``forecast/<rule>`` for forecasters.

    Example::

        from capgeo_callbacks.integrations.hf import CapgeoTrainerCallback

        rows = {"input_ids": ids, "attention_mask": mask}  # a fixed probe set, e.g. 2048 prompts
        callback = CapgeoTrainerCallback(rows, selector="last", acc_fn=my_accuracy)
        trainer = Trainer(model=model, args=args, train_dataset=train, callbacks=[callback])
        trainer.train()  # capgeo_summary.json in args.output_dir
    """

    def __init__(
        self,
        probe_rows: Mapping[str, Tensor],
        layers: str | Sequence[str] | None = None,
        selector: Selector | None = None,
        num_rows: int = 2048,
        settings: DetectionSettings | None = None,
        eval_steps: Sequence[int] | None = None,
        points: int = 256,
        schedule: str = "geometric",
        max_steps: int | None = None,
        acc_fn: AccFn | None = None,
        output_dir: str | Path | None = None,
        probes: bool = True,
        batch_size: int = 64,
        on_alert: Callable[[Alert], Any] | None = None,
        run_info: Mapping[str, Any] | None = None,
        rules: Sequence[Rule] | None = None,
    ) -> None:
        rows = _check_rows(probe_rows)
        if selector is None:
            selector = "answer" if MASK_KEY in rows else "last"
        validate_selector(selector)
        if selector in ANSWER_SELECTORS and MASK_KEY not in rows:
            raise ValueError(f"selector {selector!r} needs probe_rows[{MASK_KEY!r}]; the rows have {sorted(rows)}. "
                             "Pass selector='last', 'mean', 'all' or a callable")
        patterns = None if layers is None else ([layers] if isinstance(layers, str) else list(layers))
        if patterns is not None and (not patterns or not all(isinstance(p, str) and p for p in patterns)):
            raise ValueError(f"layers must be globs over embed, layers.<i>, ... (non-empty strings) or None, "
                             f"got {layers!r}")
        check_positive_int("num_rows", num_rows, 2)
        check_positive_int("points", points)
        check_positive_int("batch_size", batch_size)
        if max_steps is not None:
            check_positive_int("max_steps", max_steps)
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown evaluation schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")
        if eval_steps is not None:
            if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in eval_steps) or not eval_steps:
                raise ValueError(f"eval_steps must be non-negative integers, got {eval_steps!r}")
            eval_steps = sorted(set(eval_steps))
        if settings is not None and not isinstance(settings, DetectionSettings):
            raise ValueError(f"settings must be a DetectionSettings, got {type(settings).__name__}")
        for name, fn, signature in (("acc_fn", acc_fn, "(model, rows) -> float"), ("on_alert", on_alert,
                                                                                 "alert -> None")):
            if fn is not None and not callable(fn):
                raise ValueError(f"{name} must be callable {signature}, got {fn!r}")
        if run_info is not None and not isinstance(run_info, Mapping):
            raise ValueError(f"run_info must be a mapping of summary fields, got {type(run_info).__name__}")
        self.probe_rows = rows
        self.layers = patterns
        self.selector: Selector = selector
        self.num_rows = num_rows
        self.settings = settings if settings is not None else DetectionSettings()
        self.eval_steps: list[int] | None = eval_steps
        self.points = points
        self.schedule = schedule
        self.max_steps = max_steps
        self.acc_fn = acc_fn
        self.output_dir = output_dir
        self.scored = {TARGET_KEY, MASK_KEY} <= set(rows)
        self.probes = bool(probes) and self.scored and selector == "answer"
        self.batch_size = batch_size
        self.on_alert = on_alert
        self.run_info = dict(run_info or {})
        self.labels: list[str] = []  # the measured hidden states, in depth order
        self.series: dict[str, list[list[float]]] = {}  # tag -> [[step, value], ...]: what this callback measures
        self.tracker = RunTracker(rules, self.settings, self.run_info, ACC_KEY, LOGPROB_KEY, None)
        self.rows: dict[str, int] = {}
        self.summary: dict[str, Any] = {}
        self.warnings = _Warnings()
        self._probe = self._probe_set()
        self._scheduled: frozenset[int] = frozenset(eval_steps or ())
        self._pending: dict[str, float] = {}
        self._parameters = 0
        self._zero = True

    @property
    def steps(self) -> list[int]:
        """The steps measured so far."""
        return self.tracker.steps

    @property
    def acc(self) -> list[list[float]]:
        return self.tracker.acc

    @property
    def logprob(self) -> list[list[float]]:
        return self.tracker.scalars.get(LOGPROB_KEY, [])

    @property
    def alerts(self) -> list[Alert]:
        return self.tracker.alerts

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: nn.Module | None = None, **kwargs: Any) -> None:
        # configuration errors raise here, before any update; the measurement itself never does
        if model is None:
            raise ValueError("CapgeoTrainerCallback needs the model (the Trainer passes it to every callback)")
        self._zero = bool(state.is_world_process_zero)
        self._check_model(model)
        if self.eval_steps is None:
            budget = self.max_steps if self.max_steps is not None else int(state.max_steps or 0)
            if budget < 1:
                raise ValueError("CapgeoTrainerCallback needs a budget: pass eval_steps=[...] or max_steps=N, or "
                                 "give the Trainer max_steps / num_train_epochs")
            self._scheduled = frozenset(evaluation_steps(budget, self.points, self.schedule))
        if state.global_step > 0 and not self.acc:
            self._restore(state)
        if state.global_step in self._scheduled:
            self._measure_at(state, model)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    model: nn.Module | None = None, **kwargs: Any) -> None:
        if model is not None and state.global_step in self._scheduled:
            self._measure_at(state, model)

    @never_fails
    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs is not None and self._pending:
            logs.update(self._pending)
            self._pending = {}

    @never_fails
    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        summary = self.build_summary(state)
        directory = self.output_dir if self.output_dir is not None else args.output_dir
        if self._zero and directory is not None:
            write_summary(summary, directory, SUMMARY_FILENAME)

    def build_summary(self, state: TrainerState | None = None) -> dict[str, Any]:
        """The run summary (also stored as ``self.summary``), from the series measured so far."""
        selectors = {"rankme": selector_name(self.selector)}
        if self.probes:
            selectors["probe_acc"] = selector_name(self.selector)
        self.summary = self.tracker.summary(self.series, steps=state.global_step if state is not None else None,
                                            parameters=self._parameters or None, rows=self.rows, selectors=selectors)
        return self.summary

    def _check_model(self, model: nn.Module) -> None:
        config = getattr(model, "config", None)
        num_layers = int(getattr(config, "num_hidden_layers", 0) or 0)
        if num_layers < 1:
            raise ValueError(f"CapgeoTrainerCallback needs a Hugging Face model whose config has num_hidden_layers; "
                             f"{type(model).__name__} has none")
        labels = hf_layer_labels(num_layers + 1, num_layers)
        for pattern in self.layers or ():
            if not any(glob_match(pattern, label) for label in labels):
                raise ValueError(f"layer pattern {pattern!r} matches none of {', '.join(labels)}")
        vocab = int(getattr(config, "vocab_size", 0) or 0)
        top = int(self.probe_rows["input_ids"].max())
        if vocab and top >= vocab:
            raise ValueError(f"probe token id {top} is outside the model's vocabulary ({vocab} tokens)")
        self._parameters = sum(p.numel() for p in model.parameters())

    def _probe_set(self) -> ProbeSet:
        rows, n = self.probe_rows, self.probe_rows["input_ids"].shape[0]
        batches = [{key: value[i:i + self.batch_size] for key, value in rows.items()}
                   for i in range(0, n, self.batch_size)]
        # batch_size=None: the loader yields the prepared batches as they are, in order
        return ProbeSet(DataLoader(batches, batch_size=None), {"source": "probe_rows", "examples": n}, set(rows))

    @never_fails
    def _measure_at(self, state: TrainerState, model: nn.Module) -> None:
        step = int(state.global_step)
        if self.acc and self.acc[-1][0] == step:
            return  # measured at this step already (on_train_begin of a run resumed at a scheduled step)
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
        with _measuring(model, device):
            measured, labels = measure_hf(model, self._probe, layers=self.layers, selector=self.selector,
                                          num_rows=self.num_rows, probes=self.probes, device=str(device),
                                          mask_key=MASK_KEY, warn=self.warnings)
            acc = measured.acc
            if self.acc_fn is not None:
                acc = float(self.acc_fn(model, to_device(self.probe_rows, device)))
        self.labels = labels
        if not self.scored and self.acc_fn is None:
            self.warnings("no-acc", "the probe rows have no targets + answer_mask and no acc_fn was given: "
                          "accuracy is NaN, so acquisition is never detected")
        values = {f"rankme/{label}": value for label, value in measured.rankme.items()}
        values.update({f"probe_acc/{label}": value for label, value in measured.probe_acc.items()})
        logged: dict[str, float] = {}
        for tag, value in values.items():
            if math.isfinite(value):
                append_point(self.series.setdefault(tag, []), step, float(value))
                logged[tag] = float(value)
        self.rows.update(measured.rows)
        logged[ACC_KEY] = float(acc)
        scalars = {LOGPROB_KEY: float(measured.logprob)} if math.isfinite(measured.logprob) else {}
        logged.update(scalars)
        update = self.tracker.update(step, float(acc), scalars, self.series)
        logged.update({f"forecast/{f.rule}": float(f.predicted) for f in update.forecasts
                       if f.predicted is not None and math.isfinite(f.predicted)})
        state.log_history.append({**logged, "step": step})
        self._pending = logged
        for alert in update.alerts:
            self._announce(alert)

    def _announce(self, alert: Alert) -> None:
        if not self._zero:
            return
        log.warning(alert_message(alert, ACC_KEY))
        if self.on_alert is not None:
            try:
                self.on_alert(alert)
            except Exception as error:  # noqa: BLE001 - the user's hook must not stop training either
                self.warnings("on_alert", f"on_alert raised {type(error).__name__}: {error}; training goes on")

    def _restore(self, state: TrainerState) -> None:
        """The series of a resumed run, from the entries this callback added to ``state.log_history``."""
        for entry in state.log_history:  # replayed through the tracker: the alerts raised before are not announced
            if ACC_KEY not in entry or "step" not in entry:
                continue
            step = int(entry["step"])
            for tag, value in entry.items():
                if tag.startswith(("rankme/", "probe_acc/")):
                    append_point(self.series.setdefault(tag, []), step, float(value))
            scalars = {LOGPROB_KEY: float(entry[LOGPROB_KEY])} if LOGPROB_KEY in entry else {}
            self.tracker.update(step, float(entry[ACC_KEY]), scalars, self.series)
        self.labels = [tag[len("rankme/"):] for tag in self.series if tag.startswith("rankme/")]


def _check_rows(rows: Any) -> dict[str, Tensor]:
    if not isinstance(rows, Mapping) or "input_ids" not in rows:
        raise ValueError("probe_rows must be a dict with 'input_ids' (N x T integer tensor), optionally "
                         f"'attention_mask', 'targets' + '{MASK_KEY}'; got "
                         f"{sorted(rows) if isinstance(rows, Mapping) else type(rows).__name__}")
    ids = rows["input_ids"]
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.dtype.is_floating_point or ids.shape[0] < 1:
        raise ValueError(f"probe_rows['input_ids'] must be an N x T integer tensor with N >= 1, got "
                         f"{getattr(ids, 'dtype', type(ids).__name__)} of shape {tuple(getattr(ids, 'shape', ()))}")
    bad = [key for key, value in rows.items() if not isinstance(value, Tensor) or value.shape[:2] != ids.shape]
    if bad:
        raise ValueError(f"probe_rows[{', '.join(map(repr, bad))}] must be tensors of input_ids' shape "
                         f"{tuple(ids.shape)}")
    if (TARGET_KEY in rows) != (MASK_KEY in rows):
        raise ValueError(f"probe_rows needs both {TARGET_KEY!r} and {MASK_KEY!r} (the answer's tokens and where they "
                         f"are) or neither; got {sorted(rows)}")
    return {key: value.detach().cpu() for key, value in rows.items()}


@contextlib.contextmanager
def _measuring(model: nn.Module, device: torch.device) -> Iterator[None]:
    """Eval mode and no grad for the ``with`` block, the global RNG forked (nothing drawn here reaches the
    training stream: iterating a DataLoader draws a seed), each submodule's mode restored afterwards."""
    modes = [(module, module.training) for module in model.modules()]
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=cuda), torch.no_grad():
            model.eval()
            yield
    finally:
        for module, training in modes:
            module.training = training
