"""The measure registry: :class:`MeasureSpec` (what a measure says about itself), the registry of specs, and
what is generated from it (the ``--measures`` grammar, the callbacks, detection's transition kinds, the
Markdown table of docs/measures.md)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from lightning.pytorch.callbacks import Callback

from capgeo_callbacks.callbacks.base import MeasureCallback
from capgeo_callbacks.detection.settings import TRANSITION_KINDS
from capgeo_callbacks.publish.text import markdown_row

__all__ = [
    "COSTS",
    "NEEDS",
    "PRESETS",
    "MeasureSpec",
    "build_measure_callbacks",
    "default_measures",
    "get_measure",
    "measure_names",
    "measure_specs",
    "measure_transitions",
    "measures_help",
    "measures_markdown",
    "register_measure",
    "resolve_measures",
    "unregister_measure",
]

# What a measure needs from the run: the glue its callback builds on.
NEEDS: Mapping[str, str] = MappingProxyType({
    "hidden_states": "hidden states, from forward hooks on the validation pass",
    "per_example_gradients": "per-example gradients of the loss (`vmap(grad)`) on a fixed training batch",
    "loss_closure": "the loss of a fixed training batch as a closure (Hessian-vector products, SGLD draws)",
    "parameters": "the model's parameters at the evaluation (no forward pass)",
})
COSTS: Mapping[str, str] = MappingProxyType({
    "cheap": "rides on the validation pass, or reads the weights (no forward pass of its own)",
    "costly": "forward and backward passes of its own, at the start of the validations it measures at",
})
PRESETS = ("default", "none", "all")
# Placeholders of the logged-key patterns: a watched layer's short name (``blocks.0``), an index.
PLACEHOLDERS: Mapping[str, str] = MappingProxyType({"<layer>": r"[^/]+", "<i>": r"\d+"})


@dataclass(frozen=True)
class MeasureSpec:
    """What a measure says about itself: its callback and defaults, what it costs and needs, what it writes.

    Args:
        name: the name ``train.py --measures`` takes (lower case, digits and ``_``; not a preset name).
        callback: its :class:`~capgeo_callbacks.MeasureCallback` subclass; every option below is one of its
            constructor arguments.
        needs: what it measures on: a key of :data:`NEEDS` (``hidden_states``, ``per_example_gradients``,
            ``loss_closure``).
        cost: ``cheap`` (rides on the validation pass) or ``costly`` (passes of its own): :data:`COSTS`.
        keys: the logged keys under its default options, as patterns: ``<layer>`` is a watched layer's short
            name, ``<i>`` an index (``rankme/<layer>``, ``hessian/eig_<i>``).
        every_n_evals: default cadence: measure at every n-th evaluation.
        options: default constructor arguments besides ``every_n_evals`` (the callback's own defaults
            otherwise).
        transitions: how detection finds each key's transition: key (or key prefix ending in ``/``) ->
            ``collapse``, ``crossing`` or ``change`` (``DetectionSettings.measure_transitions``).
        default: whether ``--measures default`` takes it.
        optional_keys: keys written only under other options (``hessian/trace`` with ``trace=True``).
        functions: the pure functions it is computed by (documentation).
        description: what it is, in a line.
        rows_of: the measure on whose rows this one is computed (ILDR on RankMe's): not a callback of its own, it is
            switched on in that measure's callback (its ``callback``) by its ``options``; chosen, the other measure
            must be chosen too.

    Raises:
        ValueError: on a bad value; the message names the field and what would be right.

    Example::

        register_measure(MeasureSpec(name="norm", callback=NormMonitor, needs="hidden_states", cost="cheap",
                                     keys=("norm/<layer>",), transitions={"norm/": "change"}))
    """

    name: str
    callback: type[Callback]
    needs: str
    cost: str
    keys: tuple[str, ...]
    every_n_evals: int = 1
    options: Mapping[str, Any] = field(default_factory=dict)
    transitions: Mapping[str, str] = field(default_factory=dict)
    default: bool = False
    optional_keys: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    description: str = ""
    rows_of: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", self.name) \
                or self.name in PRESETS:
            raise ValueError(f"name must be lower case letters, digits and '_' and not one of {', '.join(PRESETS)}, "
                             f"got {self.name!r}")
        if not (isinstance(self.callback, type) and issubclass(self.callback, MeasureCallback)):
            raise ValueError(f"{self.name}: callback must be a MeasureCallback subclass (the detector reads the "
                             f"series of those), got {self.callback!r}")
        if self.needs not in NEEDS:
            raise ValueError(f"{self.name}: needs must be one of {', '.join(NEEDS)}, got {self.needs!r}")
        if self.cost not in COSTS:
            raise ValueError(f"{self.name}: cost must be one of {', '.join(COSTS)}, got {self.cost!r}")
        for label in ("keys", "optional_keys", "functions"):
            value = getattr(self, label)
            if isinstance(value, str) or not all(isinstance(item, str) and item for item in value):
                raise ValueError(f"{self.name}: {label} must be a sequence of non-empty strings, got {value!r}")
            object.__setattr__(self, label, tuple(value))
        if not self.keys:
            raise ValueError(f"{self.name}: keys must name at least one logged key")
        if isinstance(self.every_n_evals, bool) or not isinstance(self.every_n_evals, int) or self.every_n_evals < 1:
            raise ValueError(f"{self.name}: every_n_evals must be an integer >= 1, got {self.every_n_evals!r}")
        if "every_n_evals" in self.options:
            raise ValueError(f"{self.name}: give the cadence as every_n_evals=..., not in options")
        parameters = inspect.signature(self.callback).parameters
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            unknown = sorted(set(self.options) - set(parameters))
            if "every_n_evals" not in parameters or unknown:
                raise ValueError(f"{self.name}: {self.callback.__name__} takes no argument(s) "
                                 f"{', '.join(unknown or ['every_n_evals'])}; its arguments: {', '.join(parameters)}")
        for key, kind in self.transitions.items():
            if kind not in TRANSITION_KINDS:
                raise ValueError(f"{self.name}: transition of {key!r} must be one of {', '.join(TRANSITION_KINDS)}, "
                                 f"got {kind!r}")
            patterns = (*self.keys, *self.optional_keys)
            declared = any(p.startswith(key) for p in patterns) if key.endswith("/") else self.writes(key)
            if not declared:
                raise ValueError(f"{self.name}: transition key {key!r} is none of its keys ({', '.join(patterns)})")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        object.__setattr__(self, "transitions", MappingProxyType(dict(self.transitions)))
        object.__setattr__(self, "default", bool(self.default))
        if self.rows_of is not None and (self.rows_of == self.name or not self.options):
            raise ValueError(f"{self.name}: rows_of names another measure, whose callback's options switch this one on "
                             f"(options=...), got rows_of={self.rows_of!r} and options {dict(self.options)}")

    def callback_options(self, **overrides: Any) -> dict[str, Any]:
        """The callback's constructor arguments: the cadence, the default options, then ``overrides``."""
        return {"every_n_evals": self.every_n_evals, **self.options, **overrides}

    def build(self, **overrides: Any) -> Callback:
        """The callback, built from :meth:`callback_options` (``overrides`` over the defaults)."""
        return self.callback(**self.callback_options(**overrides))

    def config(self, **overrides: Any) -> dict[str, Any]:
        """The callback as a LightningCLI ``trainer.callbacks`` entry: ``class_path`` and ``init_args``."""
        def plain(value: Any) -> Any:
            return list(value) if isinstance(value, tuple) else value

        return {"class_path": f"{self.callback.__module__}.{self.callback.__qualname__}",
                "init_args": {key: plain(value) for key, value in self.callback_options(**overrides).items()}}

    def writes(self, key: str, optional: bool = True) -> bool:
        """Whether ``key`` is one of the keys this measure logs (``optional``: also the optional ones)."""
        patterns = (*self.keys, *self.optional_keys) if optional else self.keys
        return any(key_pattern(pattern).fullmatch(key) for pattern in patterns)


def key_pattern(pattern: str) -> re.Pattern[str]:
    """The regular expression of a logged-key pattern (:data:`PLACEHOLDERS` in it)."""
    parts = re.split(f"({'|'.join(map(re.escape, PLACEHOLDERS))})", pattern)
    return re.compile("".join(PLACEHOLDERS.get(part, re.escape(part)) for part in parts))


_REGISTRY: dict[str, MeasureSpec] = {}


def register_measure(spec: MeasureSpec, *, replace: bool = False) -> MeasureSpec:
    """Add ``spec`` to the registry (after those already there): ``train.py --measures`` and
    :func:`build_measure_callbacks` then take it by name. A name already registered is an error unless
    ``replace``. Returns ``spec``."""
    if not isinstance(spec, MeasureSpec):
        raise TypeError(f"register_measure takes a MeasureSpec, got {type(spec).__name__}")
    if spec.name in _REGISTRY and not replace:
        raise ValueError(f"measure {spec.name!r} is already registered (by {_REGISTRY[spec.name].callback.__name__}); "
                         "pass replace=True to replace it")
    carrier = _REGISTRY.get(spec.rows_of) if spec.rows_of is not None else None
    if spec.rows_of is not None and (carrier is None or carrier.callback is not spec.callback):
        raise ValueError(f"{spec.name}: rows_of={spec.rows_of!r} must name a measure registered before it with the "
                         f"same callback ({spec.callback.__name__}); registered: {', '.join(_REGISTRY)}")
    _REGISTRY[spec.name] = spec
    return spec


def unregister_measure(name: str) -> MeasureSpec:
    """Remove the measure ``name`` from the registry; returns its spec."""
    get_measure(name)
    return _REGISTRY.pop(name)


def get_measure(name: str) -> MeasureSpec:
    """The spec of the measure ``name``; an unknown name is a ``KeyError`` that lists the registered ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown measure {name!r}; registered: {', '.join(_REGISTRY)}") from None


def measure_specs() -> tuple[MeasureSpec, ...]:
    """Every registered measure, in registration order (the order callbacks are built in)."""
    return tuple(_REGISTRY.values())


def measure_names() -> tuple[str, ...]:
    """The names of the registered measures, in registration order."""
    return tuple(_REGISTRY)


def default_measures() -> tuple[str, ...]:
    """The measures of the ``default`` preset."""
    return tuple(spec.name for spec in _REGISTRY.values() if spec.default)


def resolve_measures(spec: str) -> list[str]:
    """Expand a ``--measures`` value into measure names: ``default``, ``none``, ``all`` (every registered
    measure), or a comma-separated list of names and presets (``default,commutator``: the default measures and the
    commutator defect), each name once, in the order given."""
    presets = {"none": [], "default": list(default_measures()), "all": list(measure_names())}
    items = [item.strip() for item in spec.split(",") if item.strip()]
    names: list[str] = []
    for item in items:
        names += [name for name in presets.get(item, [item]) if name not in names]
    unknown = [name for name in names if name not in _REGISTRY]
    if unknown or not items:
        raise ValueError(
            f"unknown measure(s) {', '.join(unknown) or repr(spec)}; valid: "
            f"default, none, all, or a comma-separated list of {', '.join(_REGISTRY)} (and presets)"
        )
    return names


def measures_help() -> str:
    """The help of a ``--measures`` argument, from the registry."""
    by_cost = {cost: [spec.name for spec in _REGISTRY.values() if spec.cost == cost] for cost in COSTS}
    listed = "; ".join(f"{', '.join(names)} ({cost})" for cost, names in by_cost.items() if names)
    return (f"'default' ({', '.join(default_measures()) or 'none'}), 'none', 'all', or a comma-separated list of: "
            f"{listed}, presets included ('default,commutator') (docs/measures.md)")


def build_measure_callbacks(names: Iterable[str], options: Mapping[str, Mapping[str, Any]] | None = None
                            ) -> list[Callback]:
    """The callbacks of the measures ``names``, in registration order, each built from its spec's defaults
    with ``options[name]`` over them. A measure computed on another's rows (``rows_of``: ILDR on RankMe's) is
    switched on in that measure's callback, not built as one of its own.

    Raises:
        KeyError: on an unknown name.
        ValueError: where a measure computed on another's rows is chosen without that measure.
    """
    chosen = set(names)
    unknown = sorted(chosen - set(_REGISTRY))
    if unknown:
        raise KeyError(f"unknown measure(s) {', '.join(unknown)}; registered: {', '.join(_REGISTRY)}")
    alone = sorted(name for name in chosen if _REGISTRY[name].rows_of not in (None, *chosen))
    if alone:
        raise ValueError(f"{', '.join(alone)} is measured on the rows of {_REGISTRY[alone[0]].rows_of!r}: choose that "
                         f"measure too ('{_REGISTRY[alone[0]].rows_of},{alone[0]}')")
    options = options or {}
    callbacks = []
    for spec in _REGISTRY.values():
        if spec.name in chosen and spec.rows_of is None:
            riders = [other for other in _REGISTRY.values() if other.rows_of == spec.name and other.name in chosen]
            switched = {key: value for rider in riders for key, value in rider.options.items()}
            callbacks.append(spec.build(**{**options.get(spec.name, {}), **switched}))
    return callbacks


def measure_transitions(specs: Iterable[MeasureSpec] | None = None) -> dict[str, str]:
    """Key (or key prefix ending in ``/``) -> transition kind, over ``specs`` (default: every registered
    measure): the shape of ``DetectionSettings.measure_transitions``."""
    return {key: kind for spec in (measure_specs() if specs is None else specs)
            for key, kind in spec.transitions.items()}


# -- the Markdown table (docs/measures.md) ------------------------------------------------------------------
def _code(items: Iterable[str]) -> str:
    return ", ".join(f"`{item}`" for item in items)


def _value(value: Any) -> str:
    return repr(list(value) if isinstance(value, tuple) else value)


def _transition_of(pattern: str, kinds: Mapping[str, str]) -> str:
    """How detection reads the keys of ``pattern``: the kind of the pattern (or of a prefix of it), or of the
    instances of it that have one (``hessian/eig_0`` of ``hessian/eig_<i>``)."""
    for key, kind in kinds.items():
        if key == pattern or (key.endswith("/") and pattern.startswith(key)):
            return kind
    instances = [f"{kinds[key]} (`{key}` only)" for key in kinds if key_pattern(pattern).fullmatch(key)]
    return ", ".join(instances) or "none"


def measures_markdown(specs: Sequence[MeasureSpec] | None = None) -> str:
    """docs/measures.md: the measures, their cost, needs, defaults, logged keys and transitions."""
    specs = measure_specs() if specs is None else tuple(specs)
    lines = [
        "# Measures",
        "",
        "Generated from the measure registry (`capgeo_callbacks.registry`) by",
        "`python -m capgeo_callbacks.registry --markdown > docs/measures.md`; a test keeps it current.",
        "Each measure describes itself once, in its `MeasureSpec`: `train.py --measures` (its choices, help and",
        "callbacks) and this page are read from there, and the transition kinds agree with detection's default",
        "(`DetectionSettings.measure_transitions`; tested), to which `train.py` adds those of a registered measure.",
        "",
        markdown_row(["measure", "what", "needs", "cost", "callback", "cadence (`every_n_evals`)", "default options",
                      "logged keys", "transition", "in `default`"]),
        markdown_row(["---"] * 5 + ["---:"] + ["---"] * 4),
    ]
    for spec in specs:
        options = ", ".join(f"`{key}={_value(value)}`" for key, value in spec.options.items()) or "(the callback's)"
        keys = _code(spec.keys) + (f"; with other options {_code(spec.optional_keys)}" if spec.optional_keys else "")
        transitions = ", ".join(f"`{key}{'*' if key.endswith('/') else ''}`: {kind}"
                                for key, kind in spec.transitions.items()) or "none"
        functions = f" ({_code(spec.functions)})" if spec.functions else ""
        callback = f"`{spec.callback.__name__}`" + (f" (on `{spec.rows_of}`'s rows)" if spec.rows_of else "")
        lines.append(markdown_row([f"`{spec.name}`", f"{spec.description}{functions}", spec.needs, spec.cost, callback,
                                   str(spec.every_n_evals), options, keys, transitions,
                                   "yes" if spec.default else "no"]))
    lines += [
        "",
        "Presets: `default` is " + (_code(s.name for s in specs if s.default) or "nothing") +
        "; `none` is no measure (the detector still records accuracy and the loss); `all` is every measure.",
        "`<layer>` is a watched layer's short name (`model.blocks.0` -> `blocks.0`), `<i>` an index. `train.py`",
        "adds its own layer and row choices to the hidden-state measures (`train.MEASURE_OPTIONS`).",
        "",
        "## What each measure needs and costs",
        "",
        *[f"- `{need}`: {text}" for need, text in NEEDS.items()],
        *[f"- `{cost}`: {text}" for cost, text in COSTS.items()],
        "",
        "## Logged keys",
        "",
        markdown_row(["key", "measure", "transition"]),
        markdown_row(["---"] * 3),
    ]
    kinds = measure_transitions(specs)
    for spec in specs:
        for pattern in (*spec.keys, *spec.optional_keys):
            lines.append(markdown_row([f"`{pattern}`", f"`{spec.name}`", _transition_of(pattern, kinds)]))
    lines += [
        "",
        "## Adding a measure",
        "",
        "A measure is defined once: a function of a layer's rows (and, where it reads them, their labels) as a",
        "`RowMeasure`, or a function of the model and a fixed training batch as the `measure(model, batch, step)` of",
        "a `GradientMeasureCallback`; a monitor names it, and one `register_measure` call describes it. A Lightning",
        "Trainer and the Hugging Face callback (`measures=`) then run it alike: `train.py --measures yours` builds",
        "it, the detector records its series and, with a transition kind, detection reads it.",
        "`tests/registry/test_registry.py` adds the mean L2 norm of the hidden states this way, in one file:",
        "",
        "```python",
        "from capgeo_callbacks import HiddenStateMonitor, MeasureSpec, RowMeasure, register_measure",
        "",
        "def mean_l2_norm(rows: Tensor, labels: Tensor | None = None) -> float:  # a function of the (N, D) rows",
        "    return float(rows.double().norm(dim=1).mean())",
        "",
        "class NormMonitor(HiddenStateMonitor):",
        "    row_measures = (RowMeasure(\"norm\", mean_l2_norm),)",
        "",
        "    def __init__(self, layers=\"**.norm_f\", selector=\"first_answer\", num_rows=512, every_n_evals=1,",
        "                 mask_key=\"answer_mask\", prefix=\"norm\"):",
        "        super().__init__(layers, selector, num_rows, every_n_evals, mask_key, prefix)",
        "",
        "register_measure(MeasureSpec(name=\"norm\", callback=NormMonitor, needs=\"hidden_states\", cost=\"cheap\",",
        "                             keys=(\"norm/<layer>\",), transitions={\"norm/\": \"change\"}))",
        "```",
        "",
        "A measure that reads labels says so (`RowMeasure(..., labels=True)`) and gets the monitor's (`labels_fn`);",
        "beside one that reads none, rows without labels are kept and it is left out, noted in the run's summary",
        "(`measures_left_out`): so ILDR rides on RankMe's rows. A measure computed on another's rows is registered",
        "with `rows_of` (ILDR's entry, `rows_of=\"rankme\"`): it is switched on in that measure's monitor.",
        "",
        "Every registered measure passes one conformance test (`tests/registry/test_registry.py`): its callback",
        "is built from its defaults, writes exactly the keys it declares on a real Trainer run, and its options",
        "round-trip through a LightningCLI config.",
    ]
    return "\n".join(lines) + "\n"
