"""capgeo: watch the geometry of a transformer's hidden states while it trains.

Measures are pure functions on tensors (:mod:`~capgeo_callbacks.measures`); a hidden-state measure is a function of a
layer's rows (:class:`RowMeasure`), taken by one measuring unit (:mod:`~capgeo_callbacks.capture.unit`), which the
Lightning monitors, the Hugging Face callback (:mod:`capgeo_callbacks.integrations.hf`) and offline analysis
(:mod:`capgeo_callbacks.offline`) all drive; each measure is described once in the measure registry
(:mod:`~capgeo_callbacks.registry`); one run engine (:mod:`~capgeo_callbacks.engine`: the measures' series, cadence and
budget, and the run session of :mod:`~capgeo_callbacks.run`, which owns a run's record, rules, alerts and summary) sits
under the thin Lightning and Hugging Face adapters, and keeps one read-only view of the run for whoever asks (the
progress bar, the stopper, a tuner); rules, the stopping policy and detection work on plain series
(:mod:`~capgeo_callbacks.rules`, :mod:`~capgeo_callbacks.detection`); a training function of one's own is swept over
a grid on Ray Tune or submitit by :mod:`capgeo_callbacks.sweeps` (``capgeo sweep``, the ``sweep`` extra).
Definitions: docs/design.md.
"""

__version__ = "0.1.0"  # the package's version (pyproject.toml reads it here)

from capgeo_callbacks.callbacks import (
    CommutatorDefectMonitor,
    EvaluationSchedule,
    GradientMeasureCallback,
    GradientRankMonitor,
    HessianMonitor,
    LinearProbeMonitor,
    LLCMonitor,
    MeasureCallback,
    PrecursorDetector,
    RankMeMonitor,
    StepProgressBar,
    WeightNormMonitor,
)
from capgeo_callbacks.callbacks.hidden_state_monitor import HiddenStateMonitor
from capgeo_callbacks.capture.unit import RowMeasure
from capgeo_callbacks.detection import (
    Alert,
    DetectionSettings,
    detect_acquisition,
    detect_collapse,
    precursor_verdict,
)
from capgeo_callbacks.measures import (
    commutator_defect,
    effective_rank,
    estimate_llc,
    gradient_covariance_rank,
    gradient_effective_rank,
    hessian_top_eigenvalues,
    hessian_trace,
    ildr,
    linear_probe_accuracy,
    parameter_norm,
    per_example_gradients,
    rankme,
)
from capgeo_callbacks.registry import (
    MeasureSpec,
    get_measure,
    register_measure,
    resolve_measures,
    unregister_measure,
)
from capgeo_callbacks.rules import (
    Forecast,
    Needs,
    Rule,
    RuleOutput,
    RunView,
    StoppingPolicy,
    default_rules,
    register_rule,
)
from capgeo_callbacks.run.session import Measurements, RunSession
from capgeo_callbacks.run.summary import SUMMARY_FILENAME, read_summary

__all__ = [
    "SUMMARY_FILENAME",
    "Alert",
    "CommutatorDefectMonitor",
    "DetectionSettings",
    "EvaluationSchedule",
    "Forecast",
    "GradientMeasureCallback",
    "GradientRankMonitor",
    "HessianMonitor",
    "HiddenStateMonitor",
    "LLCMonitor",
    "LinearProbeMonitor",
    "MeasureCallback",
    "MeasureSpec",
    "Measurements",
    "Needs",
    "PrecursorDetector",
    "RankMeMonitor",
    "RowMeasure",
    "Rule",
    "RuleOutput",
    "RunSession",
    "RunView",
    "WeightNormMonitor",
    "StepProgressBar",
    "StoppingPolicy",
    "commutator_defect",
    "default_rules",
    "detect_acquisition",
    "detect_collapse",
    "effective_rank",
    "estimate_llc",
    "get_measure",
    "gradient_covariance_rank",
    "gradient_effective_rank",
    "hessian_top_eigenvalues",
    "hessian_trace",
    "ildr",
    "linear_probe_accuracy",
    "parameter_norm",
    "per_example_gradients",
    "precursor_verdict",
    "rankme",
    "read_summary",
    "register_measure",
    "register_rule",
    "resolve_measures",
    "unregister_measure",
]
