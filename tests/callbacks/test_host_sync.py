"""The default callbacks add no host sync to a training step: between evaluations, capgeo's hooks never read a tensor
back on the host (``.item()``, ``float()``, ``bool()``, ``.cpu()``, ``.tolist()``, ``.numpy()``, a boolean mask...)
nor call ``torch.cuda.synchronize``. On a GPU each would stall the step until the device catches up.

Checked on the CPU: a ``TorchFunctionMode`` active only inside the training-step hooks of the callbacks watched, on a
real Trainer, counts the calls that would sync on a GPU (calls made while the trainer validates are an evaluation's).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import Callback, Trainer, seed_everything
from torch import Tensor
from torch.overrides import TorchFunctionMode

from capgeo_callbacks import EvaluationSchedule, PrecursorDetector
from capgeo_callbacks.registry import build_measure_callbacks, default_measures
from tests.callbacks.helpers import TinyAnswerLM, answer_loaders

TRAINING_HOOKS = ("on_train_batch_start", "on_train_batch_end", "on_before_backward", "on_after_backward",
                  "on_before_optimizer_step", "on_before_zero_grad")
# Tensor methods that read a tensor's values on the host: a device sync on a GPU
READS = {Tensor.item, Tensor.tolist, Tensor.numpy, Tensor.cpu, Tensor.__bool__, Tensor.__float__, Tensor.__int__,
         Tensor.__index__, Tensor.__repr__, Tensor.__format__, Tensor.nonzero, torch.nonzero}


class HostReads(TorchFunctionMode):
    """Counts, by name, the calls that read tensors on the host (``.to`` the CPU included) while ``active()``."""

    def __init__(self, active: Callable[[], bool]) -> None:
        super().__init__()
        self.active = active
        self.calls: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.active():
            to_cpu = func is Tensor.to and any(
                (isinstance(a, (str, torch.device)) and torch.device(a).type == "cpu") for a in (*args[1:],
                                                                                              kwargs.get("device")))
            mask = func is Tensor.__getitem__ and any(isinstance(a, Tensor) and a.dtype == torch.bool
                                                      for a in (args[1] if isinstance(args[1], tuple) else (args[1],)))
            if func in READS or to_cpu or mask:
                self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **kwargs)


@contextmanager
def counting_host_reads(trainer: Trainer, callbacks: list[Callback]) -> Iterator[HostReads]:
    """Every training-step hook of ``callbacks`` runs under a :class:`HostReads` (and ``torch.cuda.synchronize`` is
    counted too) that counts only outside validation."""
    reads = HostReads(lambda: not (trainer.validating or trainer.sanity_checking))
    synchronize = torch.cuda.synchronize

    def counted_synchronize(*args: Any, **kwargs: Any) -> None:
        reads.calls.append("torch.cuda.synchronize")
        return synchronize(*args, **kwargs)

    def under_mode(hook: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(hook)
        def watched(*args: Any, **kwargs: Any) -> Any:
            torch.cuda.synchronize = counted_synchronize
            try:
                with reads:
                    return hook(*args, **kwargs)
            finally:
                torch.cuda.synchronize = synchronize

        return watched

    for callback in callbacks:
        for name in TRAINING_HOOKS:
            setattr(callback, name, under_mode(getattr(callback, name)))
    yield reads


SCHEDULE = [0, 1, 2, 4, 8, 70, 140]  # more than 64 steps between two evaluations


def train_watching(callbacks: list[Callback], watched: list[Callback], root: Path, steps: int = 140) -> list[str]:
    """Train TinyAnswerLM for ``steps`` with ``callbacks`` (files under ``root``) and return the host reads made in
    the training hooks of ``watched``."""
    seed_everything(0, verbose=False)
    trainer = Trainer(max_steps=steps, val_check_interval=1, check_val_every_n_epoch=None, logger=False,
                      default_root_dir=root,
                      callbacks=callbacks,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                      num_sanity_val_steps=0, accelerator="cpu")
    train, val = answer_loaders()
    with counting_host_reads(trainer, watched) as reads:
        trainer.fit(TinyAnswerLM(), train, val)
    assert trainer.global_step == steps
    return reads.calls


def test_the_default_callbacks_read_nothing_on_the_host_in_a_training_step(tmp_path: Path) -> None:
    detector = PrecursorDetector(monitor="val_acc")
    callbacks = [*build_measure_callbacks(default_measures(), {"probes": {"every_n_evals": 1}}), detector,
                 EvaluationSchedule(steps=SCHEDULE)]
    assert train_watching(callbacks, callbacks, tmp_path) == []
    assert [int(step) for step, _ in detector.scalars["train/loss"]] == SCHEDULE[1:]  # every interval's loss
    assert {tag.split("/")[0] for tag in detector.summary["series"]} >= {"rankme", "probe_acc"}


class ReadsTheLoss(Callback):
    """A callback that syncs in every step: what the check must catch."""

    def on_train_batch_end(self, trainer: Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.last = float(outputs["loss"])


@pytest.mark.parametrize("reader", [ReadsTheLoss])
def test_a_callback_that_reads_the_loss_every_step_is_caught(reader: type[Callback], tmp_path: Path) -> None:
    callback = reader()
    reads = train_watching([callback, EvaluationSchedule(steps=SCHEDULE)], [callback], tmp_path, steps=20)
    assert reads.count("__float__") == 20
