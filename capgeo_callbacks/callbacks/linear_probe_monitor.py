r"""Linear probe monitor
====================

Held-out accuracy of a linear probe from each watched layer's hidden states to the correct answer token,
measured on the validation pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from capgeo_callbacks.callbacks._hidden import HiddenStateMonitor
from capgeo_callbacks.capture.batches import answer_labels
from capgeo_callbacks.capture.hooks import LabelsFn
from capgeo_callbacks.capture.layers import DEFAULT_LAYERS
from capgeo_callbacks.capture.measuring import probe_of_rows
from capgeo_callbacks.capture.selectors import Selector


class LinearProbeMonitor(HiddenStateMonitor):
    r"""Log, per watched layer, the held-out accuracy of a linear probe from hidden states to labels.

    Rows are captured as by :class:`~capgeo_callbacks.RankMeMonitor` (forward hooks on the validation pass,
    no extra forward; the first ``num_rows`` selected rows of the unshuffled validation set; under DDP rows
    and labels of all ranks are gathered first). The label of a row is the correct answer token at that
    position, ``batch[target_key][batch[mask_key]]``, or ``labels_fn(batch)`` for other models. The probe
    is closed-form ridge regression to one-hot labels on standardised features
    (:func:`~capgeo_callbacks.measures.probes.linear_probe_accuracy`), fit on the first half of the rows
    and scored on the second half: deterministic, no optimiser, no RNG.

    Args:
        layers: module names or globs over ``pl_module.named_modules()`` (as for ``RankMeMonitor``).
        num_rows: rows per layer (half fit, half scored).
        every_n_evals: measure at every n-th validation.
        mask_key: batch key of the answer mask.
        target_key: batch key of the targets whose masked entries are the labels.
        ridge: the probe's L2 penalty on standardised features.
        selector: token rows (as for ``RankMeMonitor``); every selector but ``"answer"`` needs ``labels_fn``.
        labels_fn: ``labels_fn(batch) -> Tensor`` of integer labels, one per selected row (e.g.
            ``lambda batch: batch[1]`` for ``(x, y)`` batches with ``selector="mean"``).
        prefix: tag prefix.

    Raises:
        ValueError: on a bad argument (a selector other than ``"answer"`` without ``labels_fn``), or in
            ``setup`` if a layer pattern matches no module (the message lists the closest names).

    Logged keys:
        ``probe_acc/<layer>`` for each watched layer, named as by ``RankMeMonitor``.

    Example::

        probes = LinearProbeMonitor(layers="encoder.layers.*", selector="mean", labels_fn=lambda b: b[1])
        trainer = Trainer(callbacks=[probes])
    """

    min_rows = 4  # half to fit, half to score

    def __init__(
        self,
        layers: str | Sequence[str] = DEFAULT_LAYERS,
        num_rows: int = 2048,
        every_n_evals: int = 1,
        mask_key: str = "answer_mask",
        target_key: str = "targets",
        ridge: float = 1e-3,
        selector: Selector = "answer",
        labels_fn: LabelsFn | None = None,
        prefix: str = "probe_acc",
    ) -> None:
        if labels_fn is not None and not callable(labels_fn):
            raise ValueError(f"labels_fn must be callable batch -> labels, got {type(labels_fn).__name__}")
        if labels_fn is None and selector != "answer":
            raise ValueError(f"selector {selector!r} needs labels_fn=lambda batch: ... (one label per selected row); "
                             f"only selector 'answer' takes its labels from batch[{target_key!r}]")
        if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or not ridge >= 0:
            raise ValueError(f"ridge must be a non-negative number, got {ridge!r}")
        self.target_key = target_key
        self.ridge = float(ridge)
        self.labels_fn = labels_fn
        super().__init__(layers, selector, num_rows, every_n_evals, mask_key, prefix,
                         labels_fn=labels_fn if labels_fn is not None else self.answer_labels)

    def answer_labels(self, batch: Any) -> Tensor:
        """The correct answer token at each answer position: ``batch[target_key][batch[mask_key]]``."""
        return answer_labels(batch, self.target_key, self.mask_key)

    @property
    def config(self) -> dict[str, Any]:
        return {**super().config, "ridge": self.ridge, "target_key": self.target_key}

    def measure_rows(self, name: str, rows: Tensor, labels: Tensor | None, step: int) -> float | None:
        assert labels is not None
        return probe_of_rows(name, rows, labels, self.ridge, step, self.warn_once)
