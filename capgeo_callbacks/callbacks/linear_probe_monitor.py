r"""Linear probe monitor
====================

Held-out accuracy of a linear probe from each watched layer's hidden states to the batch's targets (the next
token, the answer, the class), measured on the validation pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from capgeo_callbacks.callbacks.hidden_state_monitor import HiddenStateMonitor
from capgeo_callbacks.capture.hooks import LabelsFn
from capgeo_callbacks.capture.selectors import Selector
from capgeo_callbacks.capture.unit import ProbeUnit


class LinearProbeMonitor(HiddenStateMonitor):
    r"""Log, per watched layer, the held-out accuracy of a linear probe from hidden states to labels.

    Rows are captured as by :class:`~capgeo_callbacks.RankMeMonitor` (forward hooks on the validation pass,
    no extra forward; the first ``num_rows`` selected rows of the unshuffled validation set; under DDP rows
    and labels of all ranks are gathered first). Labels and rows are found in the batch without configuration
    (:func:`~capgeo_callbacks.capture.batches.find_targets`, docs/design.md, "Probe labels"): targets of the inputs'
    shape (``(inputs, targets)``, a dict's ``targets`` or Hugging Face's unshifted ``labels``, read as the label of
    the position before) give one row per position that has a target (-100: none; the last position where every
    one has a target), targets of shape (B,) one pooled row per example; capgeo's ``targets`` + ``answer_mask``
    give the answer positions. ``labels_fn`` with a ``selector`` covers any other batch. The probe is closed-form
    ridge regression to one-hot labels on standardised features
    (:func:`~capgeo_callbacks.measures.probes.linear_probe_accuracy`), fit on the first half of the rows and
    scored on the rest, the halves sharing no input (:func:`~capgeo_callbacks.measures.probes.distinct_split`):
    deterministic, no optimiser, no RNG. A batch without readable targets is said once, naming what was looked
    for, and the probe is left out.

    Args:
        layers: module names or globs over ``pl_module.named_modules()`` (as for ``RankMeMonitor``; default: the
            transformer's blocks and final norm, found at ``setup``).
        num_rows: rows per layer (half fit, half scored). Default: the first 2048 rows the validation pass gives,
            or all it has; fewer than a number you set is said once.
        every_n_evals: measure at every n-th validation.
        mask_key: batch key of capgeo's answer mask.
        target_key: batch key of the targets the ``answer`` selector's labels come from.
        ridge: the probe's L2 penalty on standardised features.
        selector: token rows: ``"target"`` (default: the rows the batch's targets name), or any selector of
            ``RankMeMonitor`` with ``labels_fn``.
        labels_fn: ``labels_fn(batch) -> Tensor`` of integer labels, one per selected row (e.g.
            ``lambda batch: batch[1][:, -1]`` with ``selector="last"``); needed by every selector but ``"target"``
            and ``"answer"``.
        prefix: tag prefix.

    Raises:
        ValueError: on a bad argument (a selector other than ``"target"`` or ``"answer"`` without ``labels_fn``),
            or in ``setup`` if a layer pattern matches no module (the message lists the closest names) or, with no
            ``layers``, if no stack of blocks is found.

    Logged keys:
        ``probe_acc/<layer>`` for each watched layer, named as by ``RankMeMonitor``.

    Example::

        probes = LinearProbeMonitor()  # the blocks found, labels from (inputs, targets) batches: nothing to say
        probes = LinearProbeMonitor(layers="model.norm", num_rows=512)
        probes = LinearProbeMonitor(layers="encoder.layers.*", selector="mean", labels_fn=lambda b: b["y"])
        trainer = Trainer(callbacks=[probes])
    """

    def __init__(
        self,
        layers: str | Sequence[str] | None = None,
        num_rows: int | None = None,
        every_n_evals: int = 1,
        mask_key: str = "answer_mask",
        target_key: str = "targets",
        ridge: float = 1e-3,
        selector: Selector = "target",
        labels_fn: LabelsFn | None = None,
        prefix: str = "probe_acc",
    ) -> None:
        super().__init__(layers, every_n_evals=every_n_evals,
                         unit=ProbeUnit(selector, num_rows, mask_key=mask_key, target_key=target_key, ridge=ridge,
                                        labels_fn=labels_fn, prefix=prefix))

    # the unit's configuration, read through
    target_key = property(lambda self: self.unit.target_key)
    ridge = property(lambda self: self.unit.ridge, doc="The probe's L2 penalty.")
    labels_fn = property(lambda self: self.unit.labels_fn, doc="The labels function given (None: found in the batch).")
