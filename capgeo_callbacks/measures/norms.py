"""Parameter norms: the L2 norm of a model's weights, taken together (docs/design.md, "Parameter norms").

The weight norm is the grokking literature's strongest cheap signal (weight decay shrinks the norm as a model moves
from memorising to generalising: Liu et al. 2022, "Omnigrok"; Nanda et al. 2023), so capgeo records it beside the
geometry of the hidden states as a baseline any geometric score must beat.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

__all__ = ["parameter_norm"]


def parameter_norm(parameters: Iterable[Tensor]) -> float:
    r"""The L2 norm of ``parameters`` taken as one vector: :math:`\sqrt{\sum_i \lVert p_i \rVert_2^2}`.

    Summed in float64 so that the norm of many float32 tensors does not depend on their order. An empty
    iterable has norm 0; a non-finite entry gives a non-finite norm (the caller reports and skips it).
    """
    squares = [torch.linalg.vector_norm(p.detach(), dtype=torch.float64).square() for p in parameters]
    if not squares:
        return 0.0
    return float(torch.stack([s.cpu() for s in squares]).sum().sqrt())
