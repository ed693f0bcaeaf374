"""capgeo's own measures, one :class:`~capgeo_callbacks.registry.MeasureSpec` each (docs/design.md, "Measures").

The cadences and options are measured choices: the costly measures at settings whose cost stays below
training's on the smallest model (README, "The corpus"): per-example gradients of 64 examples every 4th
evaluation, the top Hessian eigenvalue from 20 Lanczos steps every 16th, the LLC from 2 chains of 50 SGLD
draws on 2 batches of 64 every 32nd; probes every 4th evaluation (64 points a run of 256). The commutator defect
every 8th evaluation, on the two halves of 64 examples (one pair): on the geometric schedule of 256 evaluations at
least 8 values before a quarter of the budget (tested), and the first training batch of capgeo's tasks whole at step 0.
ILDR is measured on RankMe's rows, by RankMe's monitor (``rows_of``): no rows of its own.
"""

from __future__ import annotations

from capgeo_callbacks.callbacks import (
    CommutatorDefectMonitor,
    GradientRankMonitor,
    HessianMonitor,
    LinearProbeMonitor,
    LLCMonitor,
    RankMeMonitor,
    WeightNormMonitor,
)
from capgeo_callbacks.keys import COMMUTATOR_DEFECT, ILDR, PROBE_ACC, RANKME, WEIGHT_NORM
from capgeo_callbacks.registry.core import MeasureSpec, register_measure

__all__ = ["BUILTIN_MEASURES"]

BUILTIN_MEASURES: tuple[MeasureSpec, ...] = (
    MeasureSpec(
        name="rankme", callback=RankMeMonitor, needs="hidden_states", cost="cheap", default=True,
        options={"ildr_prefix": None}, keys=(f"{RANKME}<layer>",), transitions={RANKME: "collapse"},
        functions=("rankme",), description="RankMe (effective dimension) of each watched layer's hidden states",
    ),
    MeasureSpec(
        name="ildr", callback=RankMeMonitor, rows_of="rankme", needs="hidden_states", cost="cheap", default=True,
        options={"ildr_prefix": ILDR[:-1]}, keys=(f"{ILDR}<layer>",), functions=("ildr",),
        description="ILDR (class separation by the rows' targets) on RankMe's rows; left out, with a note in the "
                    "summary, where a row has no target",
    ),
    MeasureSpec(
        name="probes", callback=LinearProbeMonitor, needs="hidden_states", cost="cheap", default=True,
        every_n_evals=4, keys=(f"{PROBE_ACC}<layer>",), transitions={PROBE_ACC: "crossing"},
        functions=("linear_probe_accuracy",),
        description="held-out accuracy of a linear probe from each watched layer to the answer token",
    ),
    MeasureSpec(
        name="weight_norm", callback=WeightNormMonitor, needs="parameters", cost="cheap", default=True,
        keys=(f"{WEIGHT_NORM}global", f"{WEIGHT_NORM}<layer>"), transitions={WEIGHT_NORM: "change"},
        functions=("parameter_norm",),
        description="L2 norm of the parameters, all together and per watched layer (the grokking baseline)",
    ),
    MeasureSpec(
        name="grad_rank", callback=GradientRankMonitor, needs="per_example_gradients", cost="costly",
        every_n_evals=4, options={"batch_size": 64},
        keys=("grad_erank", "grad_cov_rank", "grad_cov_numerical_rank"),
        transitions={"grad_erank": "collapse", "grad_cov_rank": "collapse"},
        functions=("per_example_gradients", "gradient_effective_rank", "gradient_covariance_rank"),
        description="effective rank of the per-example gradients, and of their covariance",
    ),
    MeasureSpec(
        name="hessian", callback=HessianMonitor, needs="loss_closure", cost="costly",
        every_n_evals=16, options={"k": 1, "num_iterations": 20, "batch_size": 64},
        keys=("hessian/eig_<i>",), optional_keys=("hessian/trace",),
        transitions={"hessian/eig_0": "change", "hessian/trace": "change"},
        functions=("hessian_top_eigenvalues", "hessian_trace"),
        description="top eigenvalues of the loss Hessian (Lanczos on Hessian-vector products)",
    ),
    MeasureSpec(
        name="llc", callback=LLCMonitor, needs="loss_closure", cost="costly",
        every_n_evals=32, options={"num_chains": 2, "num_draws": 50, "batch_size": 64, "num_batches": 2},
        keys=("llc", "llc_std", "llc_fraction_below_init"), transitions={"llc": "change"},
        functions=("estimate_llc",), description="local learning coefficient (SGLD localized at the weights)",
    ),
    MeasureSpec(
        name="commutator", callback=CommutatorDefectMonitor, needs="loss_closure", cost="costly",
        every_n_evals=8, options={"batch_size": 64, "num_pairs": 1}, keys=(COMMUTATOR_DEFECT,),
        functions=("commutator_defect",),
        description="commutator defect: how far gradient steps on two fixed training batches fail to commute (the "
                    "norm of H_B g_A - H_A g_B over the product of the gradients' norms)",
    ),
)

for _spec in BUILTIN_MEASURES:
    register_measure(_spec)
