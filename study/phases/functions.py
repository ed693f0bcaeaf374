"""The training functions the study launches, imported from the examples that define them: a renamed or moved
example breaks here, when the study is imported, not in a run. The launcher records each by its path
(:func:`capgeo_callbacks.sweeps.function_name`, ``examples.grokking.grokking:train``), as registrations name them."""

from __future__ import annotations

from capgeo_callbacks.sweeps.functions import TrainingFunction, function_name
from examples.grokking.grokking import train as grokking
from examples.new_tasks.run import train as new_tasks

__all__ = ["grokking", "new_tasks", "registered_function"]


def registered_function(function: TrainingFunction, registered: str) -> TrainingFunction:
    """``function``, where a registration names the function it registered ``registered`` (its path, as the
    launcher records it); a registration that names another function refuses to run."""
    if function_name(function) != registered:
        raise SystemExit(f"the registration names the training function {registered!r}; the study imports "
                         f"{function_name(function)!r}: a registered run trains with the function registered")
    return function
