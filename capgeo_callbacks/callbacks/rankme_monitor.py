r"""RankMe monitor
==============

Per-layer RankMe (effective dimension) of hidden states, measured on the validation pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle
from typing_extensions import override

from capgeo_callbacks.callbacks.base import MeasureCallback
from capgeo_callbacks.distributed import gather_rows
from capgeo_callbacks.layers import output_tensor, resolve_layers, short_names
from capgeo_callbacks.measures.rankme import rankme
from capgeo_callbacks.selectors import Selector, SelectorError, select_rows, validate_selector

DEFAULT_LAYERS = ("**.blocks.*", "**.norm_f")


class RankMeMonitor(MeasureCallback):
    r"""Log the RankMe of each watched layer's hidden states at every evaluation.

    Forward hooks on the watched modules ride on the validation forward pass (no extra forward):
    they keep detached float32 copies of the selected token rows until ``num_rows`` rows are held,
    and are removed as soon as the validation epoch ends (or fails). The rows are the first
    ``num_rows`` selected rows of the (unshuffled) validation set, so the probe set is identical at
    every evaluation. Under DDP the rows of all ranks are gathered before the SVD, so every rank
    computes the same value; Lightning logs it once.

    RankMe (Garrido et al., 2023): with singular values :math:`s_k` of the (N, D) rows,
    :math:`p_k = s_k / \sum_j s_j + \epsilon` and :math:`\mathrm{RankMe} = \exp(-\sum_k p_k \log p_k)`.

    Args:
        layers: module names or globs over ``pl_module.named_modules()`` (``*`` is one name
            component, ``**`` any depth). The default watches every ``blocks.<i>`` and ``norm_f``
            at any depth: capgeo's models' residual stream after each block and the final norm.
        selector: token rows to use: ``"answer"`` (positions where ``batch[mask_key]`` is true),
            ``"last"``, ``"mean"``, ``"all"``, or a callable ``(hidden, batch) -> rows``.
        num_rows: rows per layer (RankMe is only comparable at equal N; the summary records it).
        every_n_evals: measure at every n-th validation.
        mask_key: batch key of the answer mask for the ``"answer"`` selector.
        eps: RankMe's epsilon.
        prefix: tag prefix.

    Raises:
        ValueError: on a bad argument, or in ``setup`` if a layer pattern matches no module (the
            message lists the closest module names).

    Logged keys:
        ``rankme/<layer>`` for each watched layer, where ``<layer>`` is the module name without the
        leading components all watched layers share (``model.blocks.0`` -> ``blocks.0``).

    Example::

        trainer = Trainer(callbacks=[RankMeMonitor(layers=["encoder.layers.*"], selector="mean"),
                                     PrecursorDetector()])
    """

    def __init__(
        self,
        layers: str | Sequence[str] = DEFAULT_LAYERS,
        selector: Selector = "answer",
        num_rows: int = 2048,
        every_n_evals: int = 1,
        mask_key: str = "answer_mask",
        eps: float = 1e-7,
        prefix: str = "rankme",
    ) -> None:
        super().__init__(every_n_evals)
        validate_selector(selector)
        if not isinstance(num_rows, int) or num_rows < 2:
            raise ValueError(f"num_rows must be an integer >= 2, got {num_rows!r}")
        if eps <= 0:
            raise ValueError(f"eps must be positive, got {eps}")
        self.layer_patterns = [layers] if isinstance(layers, str) else list(layers)
        self.selector = selector
        self.num_rows = num_rows
        self.mask_key = mask_key
        self.eps = eps
        self.prefix = prefix
        self.layer_names: list[str] = []
        self.layer_tags: dict[str, str] = {}
        self.rows_used: dict[str, int] = {}
        self._rows: dict[str, list[Tensor]] = {}
        self._counts: dict[str, int] = {}
        self._handles: list[RemovableHandle] = []
        self._batch: Any = None
        self._measuring = False

    @property
    def state_key(self) -> str:
        return self._generate_state_key(layers=self.layer_patterns, prefix=self.prefix)

    @property
    def tags(self) -> list[str]:
        """The logged tags, in layer (depth) order."""
        return [f"{self.prefix}/{self.layer_tags[name]}" for name in self.layer_names]

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.layer_names = resolve_layers(pl_module, self.layer_patterns)
        self.layer_tags = short_names(self.layer_names)

    # -- capture ---------------------------------------------------------------------------------
    def _hook(self, name: str):  # noqa: ANN202 - returns a torch hook
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if self._counts[name] >= self.num_rows or self._batch is None:
                return
            hidden = output_tensor(output)
            if hidden is None:
                self.warn_once(f"type:{name}", f"{type(self).__name__}: layer {name!r} returned "
                               f"{type(output).__name__}, not a tensor; it is skipped")
                return
            try:
                rows = select_rows(hidden.detach(), self._batch, self.selector, self.mask_key)
            except SelectorError as err:
                self.warn_once(f"select:{name}", f"{type(self).__name__}: {err}; layer {name!r} is skipped")
                return
            rows = rows[: self.num_rows - self._counts[name]].to(torch.float32, copy=True)
            self._rows[name].append(rows)
            self._counts[name] += rows.shape[0]

        return hook

    def _attach(self, pl_module: pl.LightningModule) -> None:
        modules = dict(pl_module.named_modules())
        self._rows = {name: [] for name in self.layer_names}
        self._counts = dict.fromkeys(self.layer_names, 0)
        self._handles = [modules[name].register_forward_hook(self._hook(name)) for name in self.layer_names]
        self._measuring = True

    def _detach(self) -> None:
        """Remove the hooks and drop the captured rows (read them before; also run on failure)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._rows, self._counts = {}, {}
        self._batch = None
        self._measuring = False

    @override
    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.should_measure(trainer):
            self._attach(pl_module)

    @override
    def on_validation_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._measuring:
            self._batch = batch if dataloader_idx == 0 else None

    @override
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        if not self._measuring:
            self.evaluations += 1
            return
        captured = self._rows
        self._detach()
        self._rows, self._counts = {}, {}
        self.evaluations += 1
        values: dict[str, float] = {}
        for name in self.layer_names:  # same order on every rank: gather_rows is a collective
            blocks = captured.get(name, [])
            local = torch.cat(blocks) if blocks else torch.zeros(0, 0)
            rows = gather_rows(local.to(pl_module.device))[: self.num_rows]
            tag = f"{self.prefix}/{self.layer_tags[name]}"
            if rows.shape[0] < 2:
                self.warn_once(f"empty:{name}", f"RankMeMonitor: {_rows(rows.shape[0])} captured for {name!r}, "
                               "fewer than 2; skipped")
                continue
            if rows.shape[0] < self.num_rows:
                self.warn_once(f"few:{name}", f"RankMeMonitor: {name!r} gave {rows.shape[0]} rows, fewer than "
                               f"num_rows={self.num_rows}; RankMe is measured on {rows.shape[0]} rows")
            try:
                values[tag] = rankme(rows, eps=self.eps)
            except ValueError as err:
                self.warn_once(f"value:{name}", f"RankMeMonitor: {name!r} at step {trainer.global_step}: "
                               f"{err}; skipped")
                continue
            self.rows_used[self.layer_tags[name]] = int(rows.shape[0])
        self.record(pl_module, trainer.global_step, values)

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._detach()

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._detach()

    @override
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "rows_used": dict(self.rows_used)}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.rows_used = dict(state_dict.get("rows_used", {}))


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"
