r"""Weight norm monitor
===================

The L2 norm of the model's parameters, globally and per watched layer, at every evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from capgeo_callbacks.callbacks.base import ModelMeasureCallback
from capgeo_callbacks.capture.layers import BlocksNotFound, find_blocks, resolve_layers, short_names
from capgeo_callbacks.keys import WEIGHT_NORM
from capgeo_callbacks.measures.norms import parameter_norm

GLOBAL = "global"  # the tag of the norm of every parameter: weight_norm/global


class WeightNormMonitor(ModelMeasureCallback):
    r"""Log the L2 norm of the parameters (all of them, and each watched layer's) at every evaluation.

    :math:`\lVert w \rVert_2 = \sqrt{\sum_i \lVert p_i \rVert_2^2}` over ``pl_module.parameters()``, and over each
    watched module's parameters (:func:`~capgeo_callbacks.measures.parameter_norm`). Measured at the start of the
    validation, on the weights the validation pass sees; no forward pass, nothing in training touched. Under weight
    decay the norm falls as a model turns from memorising to generalising (grokking), so it is the cheap baseline
    any geometric warning is held against (docs/design.md, "Parameter norms").

    Args:
        layers: module names or globs over ``pl_module.named_modules()`` whose own norms are logged too. ``None``
            (the default): the transformer's blocks and final norm as :class:`~capgeo_callbacks.RankMeMonitor` finds
            them (:func:`~capgeo_callbacks.capture.layers.find_blocks`), else the global norm alone; ``()``: the
            global norm alone.
        every_n_evals: measure at every n-th validation.
        prefix: tag prefix.

    Raises:
        ValueError: on a bad argument, or in ``setup`` if a given layer pattern matches no module.

    Logged keys:
        ``weight_norm/global``, and ``weight_norm/<layer>`` for each watched layer (``<layer>`` shortened as
        :class:`~capgeo_callbacks.RankMeMonitor` shortens it).

    Example::

        trainer = Trainer(callbacks=[WeightNormMonitor(layers="model.layers.*"), PrecursorDetector()])
    """

    def __init__(self, layers: str | Sequence[str] | None = None, every_n_evals: int = 1,
                 prefix: str = WEIGHT_NORM.rstrip("/")) -> None:
        super().__init__(every_n_evals)
        if layers is not None and not isinstance(layers, str) and \
                not all(isinstance(layer, str) and layer for layer in layers):
            raise ValueError(f"layers must be a module name, a glob or a sequence of them, got {layers!r}")
        if not isinstance(prefix, str) or not prefix or "/" in prefix:
            raise ValueError(f"prefix must be a non-empty tag prefix without '/', got {prefix!r}")
        self.layers = layers
        self._prefix = prefix
        self.layer_names: list[str] = []
        self.layer_tags: dict[str, str] = {}

    @property
    def prefix(self) -> str:
        return self._prefix

    @property
    def tags(self) -> list[str]:
        return [f"{self.prefix}/{GLOBAL}", *(f"{self.prefix}/{tag}" for tag in self.layer_tags.values())]

    def watch(self, model: nn.Module) -> None:
        if self.layers is None:
            try:
                self.layer_names = find_blocks(model)
            except BlocksNotFound:  # no transformer blocks to name: the global norm is still measured
                self.layer_names = []
        else:
            self.layer_names = resolve_layers(model, self.layers) if self.layers else []
        self.layer_tags = short_names(self.layer_names) if self.layer_names else {}

    def measure_model(self, model: nn.Module, step: int) -> dict[str, float]:
        """The norms of the module's weights now, by tag."""
        modules = dict(model.named_modules())
        values = {f"{self.prefix}/{GLOBAL}": parameter_norm(model.parameters())}
        for name, tag in self.layer_tags.items():
            values[f"{self.prefix}/{tag}"] = parameter_norm(modules[name].parameters())
        return values
