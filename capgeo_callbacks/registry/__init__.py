"""Measure registry
================

Each measure describes itself once, in a :class:`MeasureSpec`: its name, what it needs (hidden states,
per-example gradients, a loss closure), its callback, default cadence and options, cost class, the keys it
logs, how detection reads them, and whether the ``default`` preset takes it. ``train.py --measures`` (its
choices, help and callbacks), detection's transition kinds and docs/measures.md are generated from here, and
a user's measure plugs into the same machinery with :func:`register_measure` (found by registration, as
pytest's plugins and LightningCLI's registries are, not by an if-ladder).

    python -m capgeo_callbacks.registry --markdown > docs/measures.md

Example::

    from capgeo_callbacks import MeasureSpec, register_measure, resolve_measures, build_measure_callbacks

    register_measure(MeasureSpec(name="norm", callback=NormMonitor, needs="hidden_states", cost="cheap",
                                 keys=("norm/<layer>",), transitions={"norm/": "change"}))
    callbacks = build_measure_callbacks(resolve_measures("rankme,norm"))
"""

from capgeo_callbacks.registry.builtin import BUILTIN_MEASURES
from capgeo_callbacks.registry.core import (
    COSTS,
    NEEDS,
    PRESETS,
    MeasureSpec,
    build_measure_callbacks,
    default_measures,
    get_measure,
    key_pattern,
    measure_names,
    measure_specs,
    measure_transitions,
    measures_help,
    measures_markdown,
    register_measure,
    resolve_measures,
    unregister_measure,
)

__all__ = [
    "BUILTIN_MEASURES",
    "COSTS",
    "NEEDS",
    "PRESETS",
    "MeasureSpec",
    "build_measure_callbacks",
    "default_measures",
    "get_measure",
    "key_pattern",
    "measure_names",
    "measure_specs",
    "measure_transitions",
    "measures_help",
    "measures_markdown",
    "register_measure",
    "resolve_measures",
    "unregister_measure",
]
