r"""RankMe monitor
==============

Per-layer RankMe (effective dimension) of hidden states, measured on the validation pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from capgeo_callbacks.callbacks.hidden_state_monitor import HiddenStateMonitor
from capgeo_callbacks.capture.selectors import Selector
from capgeo_callbacks.capture.unit import RankMeUnit
from capgeo_callbacks.keys import ILDR, RANKME


class RankMeMonitor(HiddenStateMonitor):
    r"""Log the RankMe of each watched layer's hidden states at every evaluation, and ILDR on the same rows.

    Forward hooks on the watched modules ride on the validation forward pass (no extra forward): they
    keep detached float32 copies of the selected token rows until ``num_rows`` rows are held, and are
    removed as soon as the validation epoch ends (or fails). The rows are the first ``num_rows`` selected
    rows of the (unshuffled) validation set, so the probe set is identical at every evaluation. Under DDP
    the rows of all ranks are gathered first, so every rank computes the same value; Lightning logs it once.

    RankMe (Garrido et al., 2023): with singular values :math:`s_k` of the (N, D) rows,
    :math:`p_k = s_k / \sum_j s_j + \epsilon` and :math:`\mathrm{RankMe} = \exp(-\sum_k p_k \log p_k)`
    (docs/design.md, "RankMe").

    ILDR (arXiv 2604.20923), on the same rows, classed by the target the batch gives each row
    (:func:`~capgeo_callbacks.capture.selectors.row_targets`: capgeo's ``targets`` + ``answer_mask``, ``(inputs,
    targets)``, Hugging Face's ``labels``): the size-weighted spread of the class centroids over the spread within the
    classes, Fisher's criterion (:func:`~capgeo_callbacks.measures.ildr.ildr`; docs/design.md, "ILDR"). Without
    targets at the rows it is left out without a warning, noted in the run's summary (``measures_left_out``); RankMe
    goes on.

    Args:
        layers: module names or globs over ``pl_module.named_modules()`` (``*`` is one name component,
            ``**`` any depth). Default: the transformer's blocks and final norm, found at ``setup`` in the common
            layouts (:func:`~capgeo_callbacks.capture.layers.find_blocks`: Hugging Face Llama, GPT-2, GPT-NeoX and
            BERT, ``torch.nn.TransformerEncoder``, timm ViT, capgeo's own) and said once in the log.
        selector: token rows: ``"first_answer"`` (one row per example, the position predicting the first answer
            token, ``batch[mask_key]``'s first true position: a measured choice on capgeo's tasks, docs/design.md),
            ``"answer"`` (every answer position), ``"target"`` (the positions that predict a target of the batch),
            ``"question_mean"``, ``"last"`` (last real token by ``attention_mask``), ``"mean"``, ``"all"``,
            or a callable ``(hidden, batch) -> rows``. Default: what the first validation batch supports
            (:func:`~capgeo_callbacks.capture.selectors.default_selector`: ``first_answer`` with an answer mask,
            ``target`` with targets, else ``mean``), said once in the log.
        num_rows: rows per layer (RankMe is only comparable at equal N; the summary records it). Default: the
            first 2048 rows the validation pass gives, or all it has; fewer than a number you set is said once.
        every_n_evals: measure at every n-th validation.
        mask_key: batch key of the answer mask for the answer selectors.
        eps: RankMe's epsilon.
        prefix: tag prefix (several monitors with different selectors need different prefixes).
        ildr_prefix: ILDR's tag prefix (likewise); None: no ILDR.

    Raises:
        ValueError: on a bad argument, or in ``setup`` if a layer pattern matches no module (the message
            lists the closest module names) or, with no ``layers``, if no stack of blocks is found (the message
            names what was looked for).

    Logged keys:
        ``rankme/<layer>`` for each watched layer, where ``<layer>`` is the module name without the
        leading components all watched layers share (``model.blocks.0`` -> ``blocks.0``; numbered layers
        keep their container's name: ``transformer.h.0`` -> ``h.0``); ``ildr/<layer>`` where the rows have targets.

    Example::

        trainer = Trainer(callbacks=[RankMeMonitor(), PrecursorDetector()])  # blocks and rows found
        RankMeMonitor(layers=["encoder.layers.*"], selector="mean")  # or say which
    """

    def __init__(
        self,
        layers: str | Sequence[str] | None = None,
        selector: Selector | None = None,
        num_rows: int | None = None,
        every_n_evals: int = 1,
        mask_key: str = "answer_mask",
        eps: float = 1e-7,
        prefix: str = RANKME[:-1],
        ildr_prefix: str | None = ILDR[:-1],
    ) -> None:
        super().__init__(layers, every_n_evals=every_n_evals,
                         unit=RankMeUnit(selector, num_rows, mask_key=mask_key, eps=eps, prefix=prefix,
                                         ildr_prefix=ildr_prefix))

    eps = property(lambda self: self.unit.eps, doc="RankMe's epsilon.")
    ildr_prefix = property(lambda self: self.unit.ildr_prefix, doc="ILDR's tag prefix (None: no ILDR).")
