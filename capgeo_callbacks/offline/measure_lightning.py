"""Measuring a LightningModule checkpoint: validate it on the probe set with the live monitors attached.

The module is loaded with ``load_from_checkpoint`` and validated by a Lightning ``Trainer`` with
:class:`~capgeo_callbacks.RankMeMonitor` (and :class:`~capgeo_callbacks.LinearProbeMonitor` with probes)
attached: the same code, rows and layer names as the live run, plus the accuracy and log-prob the module
logs. Their values are the revision's measurements.
"""

from __future__ import annotations

import inspect
import logging
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from capgeo_callbacks.callbacks.linear_probe_monitor import LinearProbeMonitor
from capgeo_callbacks.callbacks.rankme_monitor import RankMeMonitor
from capgeo_callbacks.capture.selectors import Selector
from capgeo_callbacks.offline.dotted import resolve_dotted
from capgeo_callbacks.offline.measured import Measured, WarningLog
from capgeo_callbacks.offline.probe_sets import ProbeSet

__all__ = ["load_module", "measure_lightning", "resolve_module_class"]

_OUR_CALLBACKS = ("RankMeMonitor:", "LinearProbeMonitor:")


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


@contextmanager
def _quiet_lightning(warn: WarningLog) -> Iterator[None]:
    """Silence the per-Trainer banner and worker-count hint (they would repeat for every revision) and route
    the monitors' warnings (too few rows, a skipped layer) into the summary's warnings."""
    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            yield
    finally:
        logger.setLevel(level)
    for item in caught:
        message = str(item.message)
        if "capgeo_callbacks" in item.filename or message.startswith(_OUR_CALLBACKS):
            warn(message, message)
        else:  # not ours: let it through as it came
            warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)


def _lightning_device(device: str) -> tuple[str, int | list[int]]:
    kind, _, index = device.partition(":")
    accelerator = {"cuda": "gpu"}.get(kind, kind)
    return accelerator, [int(index)] if index else 1


def measure_lightning(
    module: pl.LightningModule,
    probe: ProbeSet,
    *,
    layers: Sequence[str],
    selector: Selector,
    num_rows: int,
    probes: bool,
    device: str,
    monitor: str,
    logprob_monitor: str | None,
    mask_key: str,
    warn: WarningLog,
) -> tuple[Measured, list[str]]:
    """Validate ``module`` on the probe loader with the live monitors attached.

    Returns:
        The measurements and the layer labels (the monitors' tags without prefix), in depth order.

    Raises:
        ValueError: if the module's ``validation_step`` cannot read the probe batches.
    """
    rankme_cb = RankMeMonitor(layers=layers, selector=selector, num_rows=num_rows, mask_key=mask_key)
    callbacks: list[pl.Callback] = [rankme_cb]
    probe_cb = None
    if probes:
        if selector == "answer":
            probe_cb = LinearProbeMonitor(layers=layers, num_rows=num_rows, mask_key=mask_key)
            callbacks.append(probe_cb)
        else:
            warn("probes-selector", f"probe accuracy needs the 'answer' selector (labels are the answer tokens); "
                 f"selector is {selector!r}, so probes are skipped")
    accelerator, devices = _lightning_device(device)
    with _quiet_lightning(warn):
        trainer = pl.Trainer(accelerator=accelerator, devices=devices, logger=False, callbacks=callbacks,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        try:
            trainer.validate(module, dataloaders=probe.loader, verbose=False)
        except (KeyError, TypeError, IndexError) as err:
            raise ValueError(f"{type(module).__name__}.validation_step failed on the probe batches "
                             f"({type(err).__name__}: {err}); the probe set has keys {sorted(probe.keys)}, and must "
                             "give what the module's validation_step reads") from err
    metrics = {key: float(value) for key, value in trainer.callback_metrics.items()}
    labels = [rankme_cb.layer_tags[name] for name in rankme_cb.layer_names]
    values = rankme_cb.values_at(trainer.global_step)
    result = Measured(
        rankme={label: values.get(f"{rankme_cb.prefix}/{label}", math.nan) for label in labels},
        acc=metrics.get(monitor, math.nan),
        logprob=metrics.get(logprob_monitor, math.nan) if logprob_monitor else math.nan,
        rows=dict(rankme_cb.rows),
        parameters=sum(p.numel() for p in module.parameters()),
    )
    if probe_cb is not None:
        probe_values = probe_cb.values_at(trainer.global_step)
        result.probe_acc = {label: probe_values[f"{probe_cb.prefix}/{label}"] for label in labels
                            if f"{probe_cb.prefix}/{label}" in probe_values}
        result.rows.update(probe_cb.rows)
    if monitor not in metrics:
        warn("monitor", f"the module logged no {monitor!r} (logged: {', '.join(sorted(metrics)) or 'nothing'}); "
             "acquisition cannot be detected (pass --monitor)")
    return result, labels
