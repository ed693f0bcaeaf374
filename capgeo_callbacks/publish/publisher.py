"""Where a run's session publishes what the run shows: scalars, text entries, alerts, images, hyperparameters and
the dashboard layout. :class:`Publisher` itself takes nothing (offline analysis, a plain loop); the Lightning
callback publishes to every logger of its Trainer (:class:`~capgeo_callbacks.publish.loggers.TrainerPublisher`),
the Hugging Face callback to the Trainer's log history."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["Publisher"]


class Publisher:
    """Takes nothing; subclasses override what their loggers can take."""

    @property
    def shows_images(self) -> bool:
        """Whether an image published here is shown somewhere (figures are drawn only then: they cost more than a
        measure)."""
        return False

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        """Scalars at ``step``."""

    def text(self, tag: str, text: str, step: int) -> None:
        """A text entry (the verdict)."""

    def alert(self, title: str, text: str, step: int) -> None:
        """An alert (a text entry where there is no alert of its own)."""

    def image(self, tag: str, image: np.ndarray, step: int) -> None:
        """An RGB image (H, W, 3) uint8."""

    def hparams(self, params: Mapping[str, Any], metrics: Mapping[str, float]) -> None:
        """Hyperparameters and the run's headline metrics."""

    def layout(self, layout: Mapping[str, Any]) -> None:
        """The dashboard's layout (TensorBoard custom scalars)."""
