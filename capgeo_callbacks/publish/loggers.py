"""Side effects for every Lightning logger: text, images, alerts and hparams through what each offers.

TensorBoard gets text entries, images and hparams; a CSV logger gets ``capgeo_text.csv`` and PNG files
beside its ``metrics.csv``; Weights & Biases gets tables, images and an alert; MLflow gets text and image
artifacts under ``capgeo/``. Any other logger gets hparams and metrics through the base ``Logger`` API.
Nothing here may stop training: a logger that cannot take something is skipped with one warning, and a
logger that fails is reported once. Only rank zero writes. The loggers are a Lightning Trainer's, or any
:class:`LoggerHost`'s (the Hugging Face callback's: the Trainer's integrations as Lightning loggers).
"""

from __future__ import annotations

import csv
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger, WandbLogger
from lightning.pytorch.loggers.logger import DummyLogger
from lightning.pytorch.utilities import rank_zero_warn

from capgeo_callbacks.publish.publisher import Publisher

__all__ = ["TEXT_FILENAME", "LoggerHost", "TrainerPublisher", "publish_alert", "publish_hparams", "publish_image",
           "publish_text", "safe_name"]

TEXT_FILENAME = "capgeo_text.csv"
IMAGE_FOLDER = "capgeo"
IMAGE_LOGGERS = (TensorBoardLogger, CSVLogger, WandbLogger, MLFlowLogger)  # the loggers :func:`publish_image` feeds

WarnFn = Callable[[str, str], None]
"""``warn(key, message)``: how a skipped side effect is reported (the caller warns once per key)."""


class LoggerHost(Protocol):
    """What publishing reads of a trainer (a Lightning ``Trainer`` is one): its loggers, whether this process is
    rank zero, and the step."""

    @property
    def loggers(self) -> Sequence[Logger]: ...

    @property
    def is_global_zero(self) -> bool: ...

    @property
    def global_step(self) -> int: ...


def _warn_each_time(key: str, message: str) -> None:
    rank_zero_warn(message)


def safe_name(tag: str) -> str:
    """A tag as a file name: ``capgeo/story`` -> ``capgeo_story``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", tag).strip("_")


def publish_text(trainer: LoggerHost, tag: str, text: str, step: int, warn: WarnFn = _warn_each_time) -> None:
    """A text entry (an alert, the verdict) for every logger of ``trainer``."""
    _each(trainer, "text", lambda logger: _text(logger, tag, text, step), warn)


def publish_image(trainer: LoggerHost, tag: str, image: np.ndarray, step: int,
                  warn: WarnFn = _warn_each_time) -> None:
    """An RGB image (H, W, 3) uint8 for every logger of ``trainer``; the newest replaces older files."""
    _each(trainer, "image", lambda logger: _image(logger, tag, image, step), warn)


def publish_alert(trainer: LoggerHost, title: str, text: str, step: int, tag: str = "capgeo/alerts",
                  warn: WarnFn = _warn_each_time) -> None:
    """An alert: a text entry everywhere, and a W&B alert where there is W&B."""
    publish_text(trainer, tag, text, step, warn)
    _each(trainer, "alert", lambda logger: _alert(logger, title, text), warn)


def publish_hparams(trainer: LoggerHost, params: Mapping[str, Any], metrics: Mapping[str, float],
                    warn: WarnFn = _warn_each_time) -> None:
    """Hyperparameters and headline metrics: one ``log_hyperparams(params, metrics)`` for TensorBoard (so its
    hparams tab is filled), ``log_hyperparams(params)`` plus ``log_metrics(metrics)`` for the others."""
    _each(trainer, "hparams", lambda logger: _hparams(logger, dict(params), dict(metrics), trainer.global_step), warn)


def _each(trainer: LoggerHost, kind: str, send: Callable[[Logger], bool], warn: WarnFn) -> None:
    if not trainer.is_global_zero:
        return
    for logger in trainer.loggers:
        name = type(logger).__name__
        try:
            taken = send(logger)
        except Exception as error:  # noqa: BLE001 - a logger's failure must never stop training
            warn(f"{name}:{kind}", f"{name} failed to take the {kind} ({type(error).__name__}: "
                    f"{str(error)[:200]}); skipped")
            continue
        if not taken and not isinstance(logger, DummyLogger):  # fast_dev_run's logger: nothing was asked of it
            warn(f"{name}:{kind}", f"{name} has no way to take a {kind}; skipped")


def _log_dir(logger: Logger) -> Path | None:
    directory = logger.log_dir
    return None if directory is None else Path(directory)


def _text(logger: Logger, tag: str, text: str, step: int) -> bool:
    if isinstance(logger, TensorBoardLogger):
        logger.experiment.add_text(tag, text, global_step=step)
    elif isinstance(logger, CSVLogger):
        directory = _log_dir(logger)
        assert directory is not None
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / TEXT_FILENAME
        new = not path.exists()
        with path.open("a", newline="") as handle:
            writer = csv.writer(handle)
            if new:
                writer.writerow(["step", "tag", "text"])
            writer.writerow([step, tag, text])
    elif isinstance(logger, WandbLogger):
        logger.log_text(key=tag, columns=["step", "text"], data=[[step, text]])
    elif isinstance(logger, MLFlowLogger):
        # one file per entry: several entries (a layer's and the run's alert) can share a step
        digest = hashlib.sha1(text.encode()).hexdigest()[:8]
        logger.experiment.log_text(logger.run_id, text, f"{IMAGE_FOLDER}/{safe_name(tag)}/step_{step:08d}_{digest}.md")
    else:
        return False
    return True


def _image(logger: Logger, tag: str, image: np.ndarray, step: int) -> bool:
    if isinstance(logger, TensorBoardLogger):
        logger.experiment.add_image(tag, image, global_step=step, dataformats="HWC")
    elif isinstance(logger, CSVLogger):
        directory = _log_dir(logger)
        assert directory is not None
        save_png(image, directory / IMAGE_FOLDER / f"{safe_name(tag)}.png")
    elif isinstance(logger, WandbLogger):
        logger.log_image(key=tag, images=[image], caption=[f"step {step}"])
    elif isinstance(logger, MLFlowLogger):
        logger.experiment.log_image(logger.run_id, image, f"{IMAGE_FOLDER}/{safe_name(tag)}.png")
    else:
        return False
    return True


def _alert(logger: Logger, title: str, text: str) -> bool:
    if isinstance(logger, WandbLogger):
        logger.experiment.alert(title=title, text=text)
    return True  # the text entry is the alert for the other loggers


def _hparams(logger: Logger, params: dict[str, Any], metrics: dict[str, float], step: int) -> bool:
    if isinstance(logger, TensorBoardLogger):
        logger.log_hyperparams(params, metrics=metrics)
        return True
    logger.log_hyperparams(params)
    finite = {key: value for key, value in metrics.items() if value == value}  # NaN: not reached
    if finite:
        logger.log_metrics(finite, step=step)
    return True


def save_png(image: np.ndarray, path: Path) -> Path:
    """Write an RGB image (H, W, 3) uint8 as PNG."""
    from matplotlib import image as mpimg

    path.parent.mkdir(parents=True, exist_ok=True)
    mpimg.imsave(path, image)
    return path


class TrainerPublisher(Publisher):
    """Publishes to every logger of a Lightning ``trainer``, on rank zero only (module docstring); a logger that
    cannot take something is reported once through ``warn``."""

    def __init__(self, trainer: LoggerHost, warn: WarnFn = _warn_each_time) -> None:
        self.trainer, self.warn = trainer, warn

    @property
    def shows_images(self) -> bool:
        return self.trainer.is_global_zero and any(isinstance(logger, IMAGE_LOGGERS) for logger in self.trainer.loggers)

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        if values and self.trainer.is_global_zero:
            for logger in self.trainer.loggers:
                logger.log_metrics(dict(values), step=step)

    def text(self, tag: str, text: str, step: int) -> None:
        publish_text(self.trainer, tag, text, step, warn=self.warn)

    def alert(self, title: str, text: str, step: int) -> None:
        publish_alert(self.trainer, title, text, step, warn=self.warn)

    def image(self, tag: str, image: np.ndarray, step: int) -> None:
        publish_image(self.trainer, tag, image, step, warn=self.warn)

    def hparams(self, params: Mapping[str, Any], metrics: Mapping[str, float]) -> None:
        publish_hparams(self.trainer, params, metrics, warn=self.warn)

    def layout(self, layout: Mapping[str, Any]) -> None:
        if self.trainer.is_global_zero:
            for logger in self.trainer.loggers:
                if isinstance(logger, TensorBoardLogger):
                    logger.experiment.add_custom_scalars(dict(layout))
