"""Measuring a LightningModule checkpoint: validate it on the probe set, capturing the watched layers' rows.

The module is loaded with ``load_from_checkpoint`` and validated by a Lightning ``Trainer``, so its own
``validation_step`` logs what it logged live (``val/acc``, ``val/token_acc``, ``val/logprob``, ...). Meanwhile the
rows of each watched layer are captured as the live monitors capture them (the same
:class:`~capgeo_callbacks.capture.hooks.HiddenStateCapture`, selectors, rows and layer names) and measured with
the same functions (:mod:`capgeo_callbacks.capture.measuring`).
"""

from __future__ import annotations

import inspect
import logging
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from capgeo_callbacks.capture.batches import answer_labels, target_labels
from capgeo_callbacks.capture.hooks import HiddenStateCapture
from capgeo_callbacks.capture.layers import resolve_layers, short_names
from capgeo_callbacks.capture.measuring import Measured, probe_of_rows, rankme_of_rows, usable_rows
from capgeo_callbacks.capture.selectors import Selector
from capgeo_callbacks.keys import PROBE_ACC, RANKME
from capgeo_callbacks.offline.dotted import resolve_dotted
from capgeo_callbacks.offline.probe_sets import ProbeSet
from capgeo_callbacks.run.failures import WarnOnce

__all__ = ["RowSpec", "load_module", "measure_lightning", "resolve_module_class"]


@dataclass(frozen=True)
class RowSpec:
    """How one hidden-state measure takes its rows: the token selector, how many rows, and its setting (RankMe's
    epsilon, or the probe's ridge penalty)."""

    selector: Selector
    num_rows: int
    setting: float


def resolve_module_class(name: str | None, recorded: str | None, path: Path) -> type[pl.LightningModule]:
    """The LightningModule class named by ``name`` (or, if None, the ``recorded`` one).

    Raises:
        ValueError: if neither names a class, or it is not a LightningModule subclass.
    """
    name = name or recorded
    if not name:
        raise ValueError(f"{path} does not record its LightningModule class; pass --module-class "
                         "package.module.ClassName (e.g. models.CapabilityModule)")
    cls = resolve_dotted(name)
    if not (isinstance(cls, type) and issubclass(cls, pl.LightningModule)):
        raise ValueError(f"--module-class {name!r} is {cls!r}, not a lightning.pytorch.LightningModule subclass")
    return cls


def load_module(cls: type[pl.LightningModule], path: Path, module_kwargs: Mapping[str, Any] | None,
                allow_pickle: bool) -> pl.LightningModule:
    """``cls.load_from_checkpoint(path)`` on the CPU, ``weights_only`` unless ``allow_pickle``."""
    kwargs = dict(module_kwargs or {})
    if "weights_only" in inspect.signature(cls.load_from_checkpoint).parameters:  # Lightning >= 2.5
        kwargs["weights_only"] = not allow_pickle
    return cls.load_from_checkpoint(path, map_location="cpu", **kwargs)


class _CaptureRows(pl.Callback):
    """Attaches the captures to the watched modules for the validation pass and hands each its batch."""

    def __init__(self, captures: Sequence[HiddenStateCapture], names: Sequence[str]) -> None:
        self.captures, self.names = captures, list(names)

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        modules = dict(pl_module.named_modules())
        for capture in self.captures:
            capture.attach({name: modules[name] for name in self.names})

    def on_validation_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                                  batch_idx: int, dataloader_idx: int = 0) -> None:
        for capture in self.captures:
            capture.set_batch(batch if dataloader_idx == 0 else None)

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for capture in self.captures:
            capture.detach()


@contextmanager
def _quiet_lightning() -> Iterator[None]:
    """Silence the per-Trainer banner and worker-count hint (they would repeat for every revision)."""
    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            yield
    finally:
        logger.setLevel(level)


def _lightning_device(device: str) -> tuple[str, int | list[int]]:
    kind, _, index = device.partition(":")
    accelerator = {"cuda": "gpu"}.get(kind, kind)
    return accelerator, [int(index)] if index else 1


def measure_lightning(
    module: pl.LightningModule,
    probe: ProbeSet,
    *,
    layers: Sequence[str],
    rankme: RowSpec,
    probes: RowSpec | None,
    device: str,
    mask_key: str,
    target_key: str = "targets",
    warn: WarnOnce,
) -> tuple[Measured, list[str]]:
    """Validate ``module`` on the probe loader, measuring RankMe (and with ``probes``, the linear probes) of the
    watched layers on the rows the live monitors would take.

    Returns:
        The measurements (the module's logged scalars in ``scalars``) and the layer labels, in depth order.

    Raises:
        ValueError: if a layer pattern matches no module, or the module's ``validation_step`` cannot read the
            probe batches.
    """
    names = resolve_layers(module, layers)
    tags = short_names(names)
    rank_capture = HiddenStateCapture(rankme.selector, rankme.num_rows, mask_key, warn=warn)
    captures = [rank_capture]
    probe_capture = None
    if probes is not None:
        labels = ((lambda batch: answer_labels(batch, target_key, mask_key)) if probes.selector == "answer" else
                  (lambda batch: target_labels(batch, mask_key)))  # the live monitor's labels
        probe_capture = HiddenStateCapture(probes.selector, probes.num_rows, mask_key, labels_fn=labels, warn=warn)
        captures.append(probe_capture)
    accelerator, devices = _lightning_device(device)
    with _quiet_lightning():
        trainer = pl.Trainer(accelerator=accelerator, devices=devices, logger=False,
                             callbacks=[_CaptureRows(captures, names)], enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False)
        try:
            trainer.validate(module, dataloaders=probe.loader, verbose=False)
        except (KeyError, TypeError, IndexError) as err:
            raise ValueError(f"{type(module).__name__}.validation_step failed on the probe batches "
                             f"({type(err).__name__}: {err}); the probe set has keys {sorted(probe.keys)}, and must "
                             "give what the module's validation_step reads") from err
    result = Measured(rankme={}, scalars={key: float(value) for key, value in trainer.callback_metrics.items()},
                      parameters=sum(p.numel() for p in module.parameters()))
    rows = rank_capture.take()
    for name in names:
        label, (z, _) = tags[name], rows.get(name, (torch.zeros(0, 0), None))
        if usable_rows(name, z.shape[0], 2, rankme.num_rows, warn):
            value = rankme_of_rows(name, z[: rankme.num_rows], rankme.setting, None, warn)
            if value is not None:
                result.rankme[label], result.rows[f"{RANKME}{label}"] = value, int(z.shape[0])
    if probe_capture is not None and probes is not None:
        probed = probe_capture.take()
        for name in names:
            label, (z, y) = tags[name], probed.get(name, (torch.zeros(0, 0), None))
            if y is not None and usable_rows(name, z.shape[0], 4, probes.num_rows, warn):
                value = probe_of_rows(name, z, y, probes.setting, None, warn)
                if value is not None:
                    result.probe_acc[label], result.rows[f"{PROBE_ACC}{label}"] = value, int(z.shape[0])
    return result, [tags[name] for name in names]
