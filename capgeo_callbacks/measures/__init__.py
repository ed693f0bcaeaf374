"""Pure measures on tensors (no Lightning): each in its own module, tested against known answers."""

from capgeo_callbacks.measures.commutator import commutator_defect
from capgeo_callbacks.measures.gradients import (
    gradient_covariance_rank,
    gradient_effective_rank,
    per_example_gradients,
)
from capgeo_callbacks.measures.hessian import hessian_top_eigenvalues, hessian_trace, lanczos
from capgeo_callbacks.measures.ildr import ildr
from capgeo_callbacks.measures.llc import estimate_llc
from capgeo_callbacks.measures.norms import parameter_norm
from capgeo_callbacks.measures.probes import linear_probe_accuracy
from capgeo_callbacks.measures.rankme import effective_rank, rankme

__all__ = [
    "commutator_defect",
    "effective_rank",
    "estimate_llc",
    "gradient_covariance_rank",
    "gradient_effective_rank",
    "hessian_top_eigenvalues",
    "hessian_trace",
    "ildr",
    "lanczos",
    "linear_probe_accuracy",
    "parameter_norm",
    "per_example_gradients",
    "rankme",
]
