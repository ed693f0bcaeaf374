"""The run engine: what capgeo does during a run, whatever trains it.

The measures (:mod:`~capgeo_callbacks.engine.measure`: their series, cadence and budget; the hidden-state measures,
:mod:`~capgeo_callbacks.engine.hidden`; the measures of the model on a fixed training batch,
:mod:`~capgeo_callbacks.engine.gradient`) and the run they feed (:mod:`~capgeo_callbacks.engine.run`: the session, the
budget over the measures, the training loss). The Lightning callbacks and the Hugging Face callback are thin adapters
over it; on a Lightning Trainer each capgeo callback joins the Trainer's record at ``setup``
(:mod:`~capgeo_callbacks.engine.joined`).
"""

from capgeo_callbacks.engine.gradient import GradientMeasure
from capgeo_callbacks.engine.hidden import HiddenStateMeasure
from capgeo_callbacks.engine.joined import Joined, joined
from capgeo_callbacks.engine.measure import Measure, ModelMeasure
from capgeo_callbacks.engine.run import RunEngine, TrainingLoss

__all__ = ["GradientMeasure", "HiddenStateMeasure", "Joined", "Measure", "ModelMeasure", "RunEngine", "TrainingLoss",
           "joined"]
