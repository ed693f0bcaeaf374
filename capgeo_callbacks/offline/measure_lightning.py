"""Measuring a LightningModule checkpoint: validate it on the probe set with the live run's hidden-state monitors.

The module is loaded with ``load_from_checkpoint`` and validated by a Lightning ``Trainer``, so its own
``validation_step`` logs what it logged live (``val/acc``, ``val/token_acc``, ``val/logprob``, ...). The hidden-state
monitors ride on that pass as they rode on the live one (:class:`~capgeo_callbacks.RankMeMonitor`,
:class:`~capgeo_callbacks.LinearProbeMonitor`, built from the live run's configuration), each driving its measuring
unit (:mod:`capgeo_callbacks.capture.unit`): the same layers, rows, labels and measure, by construction.
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

from capgeo_callbacks.callbacks.hidden_state_monitor import HiddenStateMonitor
from capgeo_callbacks.callbacks.linear_probe_monitor import LinearProbeMonitor
from capgeo_callbacks.callbacks.rankme_monitor import RankMeMonitor
from capgeo_callbacks.capture.measuring import Measured
from capgeo_callbacks.capture.selectors import Selector
from capgeo_callbacks.offline.dotted import resolve_dotted
from capgeo_callbacks.offline.probe_sets import ProbeSet
from capgeo_callbacks.run.failures import WarnOnce

__all__ = ["RowSpec", "hidden_state_monitors", "load_module", "measure_lightning", "resolve_module_class"]


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


def hidden_state_monitors(layers: Sequence[str], rankme: RowSpec, probes: RowSpec | None, *, mask_key: str,
                          target_key: str, warn: WarnOnce) -> list[HiddenStateMonitor]:
    """The live run's RankMe monitor (and, with ``probes``, its probe monitor) as configured, measuring at every
    validation they see and reporting through ``warn``."""
    monitors: list[HiddenStateMonitor] = [RankMeMonitor(layers, selector=rankme.selector, num_rows=rankme.num_rows,
                                                        mask_key=mask_key, eps=rankme.setting)]
    if probes is not None:
        monitors.append(LinearProbeMonitor(layers, num_rows=probes.num_rows, mask_key=mask_key, target_key=target_key,
                                           ridge=probes.setting, selector=probes.selector))
    for monitor in monitors:
        monitor.report_to(warn)
    return monitors


def measure_lightning(
    module: pl.LightningModule,
    probe: ProbeSet,
    monitors: Sequence[HiddenStateMonitor],
    *,
    device: str,
) -> tuple[Measured, list[str]]:
    """Validate ``module`` on the probe loader with the hidden-state ``monitors`` (fresh ones: each measures the
    validation it sees) riding on the pass.

    Returns:
        The measurements (the module's logged scalars in ``scalars``) and the layer labels, in depth order.

    Raises:
        ValueError: if a layer pattern matches no module, or the module's ``validation_step`` cannot read the
            probe batches.
    """
    accelerator, devices = _lightning_device(device)
    with _quiet_lightning():
        trainer = pl.Trainer(accelerator=accelerator, devices=devices, logger=False, callbacks=list(monitors),
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        try:
            trainer.validate(module, dataloaders=probe.loader, verbose=False)
        except (KeyError, TypeError, IndexError) as err:
            raise ValueError(f"{type(module).__name__}.validation_step failed on the probe batches "
                             f"({type(err).__name__}: {err}); the probe set has keys {sorted(probe.keys)}, and must "
                             "give what the module's validation_step reads") from err
    result = Measured(rankme={}, scalars={key: float(value) for key, value in trainer.callback_metrics.items()},
                      parameters=sum(p.numel() for p in module.parameters()))
    for monitor in monitors:
        result.add({tag: points[-1][1] for tag, points in monitor.series.items() if points})
        result.rows.update(monitor.rows)
        result.left_out.update(monitor.left_out)
    return result, list(monitors[0].layer_tags.values()) if monitors else []
