"""Detection settings: every threshold the detectors use, defined and validated in one place.

:class:`DetectionSettings` is frozen and checks each value when it is built, so a bad setting fails at
construction, never at the end of a run. The live :class:`~capgeo_callbacks.PrecursorDetector`, the
offline analysis, the report and the warning's evaluation all take one. Definitions: docs/design.md,
"Detection".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

import numpy as np

from capgeo_callbacks.keys import PROBE_ACC, RANKME, WEIGHT_NORM

__all__ = [
    "ALERT_LAYERS",
    "DEFAULT_SETTINGS",
    "MEASURE_TRANSITIONS",
    "TRANSITION_KINDS",
    "DetectionSettings",
    "transition_kind",
]

TRANSITION_KINDS = ("collapse", "crossing", "change")
ALERT_LAYERS = ("any", "deepest")

# How each measure's own transition is found, for the per-measure precursor rate. A key ending in "/" is a
# tag prefix; the longest matching prefix wins.
MEASURE_TRANSITIONS: dict[str, str] = {
    RANKME: "collapse",
    "grad_erank": "collapse",
    "grad_cov_rank": "collapse",
    "hessian/eig_0": "change",
    "hessian/trace": "change",
    "llc": "change",
    PROBE_ACC: "crossing",
    WEIGHT_NORM: "change",
}


@dataclass(frozen=True)
class DetectionSettings:
    """The settings of acquisition, collapse, recovery, verdict and log-prob emergence detection.

    Args:
        threshold: accuracy at or above which an evaluation counts towards acquisition, in (0, 1].
        patience: consecutive evaluations at or above ``threshold`` that confirm acquisition, >= 1.
        full_threshold: accuracy the run must also hold for ``patience`` evaluations to be acquired fully,
            in (0, 1] (below ``threshold``, ``threshold`` is used).
        validation_size: questions in the validation set; after acquisition, ``patience`` consecutive
            evaluations averaging below ``threshold`` minus the Wilson half-width at this size are a fall-back,
            and a run that falls back is not acquired fully, >= 1.
        window: evaluations either side of acquisition within which a collapse is "simultaneous", >= 0.
        min_drop: least peak-to-trough drop of RankMe, as a fraction of the peak, in (0, 1).
        recovery_fraction: rise from the trough, as a fraction of the drop, that confirms recovery, in (0, 1].
        recovery_evals: consecutive evaluations the rise must hold, >= 1.
        smoothing: width of the centred moving average applied to RankMe, an odd integer >= 1 (1: none).
        logprob_threshold: mean answer log-prob at which log-prob emergence is reported, finite and <= 0.
        measure_transitions: per measured tag (or tag prefix ending in ``/``), how its transition is found:
            ``collapse``, ``crossing`` or ``change`` (see :func:`~capgeo_callbacks.detection.measure_transition`).
        guard_steps: RankMe points before this step are ignored (a learning-rate warm-up's dip), >= 0.
        noise_units: the drop, and the rise that confirms recovery, must each be at least this many times the
            series' own evaluation-to-evaluation noise (a robust standard deviation), >= 0 (0: no noise scale).
        min_recovery: the rise that confirms recovery must be at least this much RankMe (absolute), >= 0.
        alert_layers: which layers may raise an alert: ``any`` watched layer, or only the ``deepest``.
        layers_required: layers that must have alerted before the run alert is raised (at most the layers
            that may alert), >= 1.

    The defaults of the last five are those of the arXiv 2602.15997 study's rule, ``rankme-recovery``
    (docs/design.md, "Detection"); other rules are adopted only where held-out seeds say they are better.

    Raises:
        ValueError: on any value outside its range; the message names the setting and the range.

    Example::

        settings = DetectionSettings(min_drop=0.3)
        PrecursorDetector(settings=settings)
    """

    threshold: float = 0.5
    patience: int = 3
    full_threshold: float = 0.9
    validation_size: int = 512
    window: int = 3
    min_drop: float = 0.25
    recovery_fraction: float = 0.10
    recovery_evals: int = 2
    smoothing: int = 3
    logprob_threshold: float = math.log(0.5)
    measure_transitions: Mapping[str, str] = field(default_factory=lambda: dict(MEASURE_TRANSITIONS))
    guard_steps: int = 0
    noise_units: float = 0.0
    min_recovery: float = 0.0
    alert_layers: str = "any"
    layers_required: int = 1

    def __post_init__(self) -> None:
        for item in fields(self):
            check_setting(item.name, getattr(self, item.name))
        # read-only, so a validated setting cannot be changed afterwards
        object.__setattr__(self, "measure_transitions", MappingProxyType(dict(self.measure_transitions)))
        for name in ("threshold", "full_threshold", "min_drop", "recovery_fraction", "logprob_threshold",
                     "noise_units", "min_recovery"):
            object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("patience", "validation_size", "window", "recovery_evals", "smoothing", "guard_steps",
                     "layers_required"):
            object.__setattr__(self, name, int(getattr(self, name)))

    def __hash__(self) -> int:
        values = self.to_dict()
        values["measure_transitions"] = tuple(sorted(values["measure_transitions"].items()))
        return hash(tuple(values.items()))

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-able dict (what a summary records)."""
        values = {item.name: getattr(self, item.name) for item in fields(self)}
        values["measure_transitions"] = dict(self.measure_transitions)
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> DetectionSettings:
        """Settings from :meth:`to_dict` output; keys it does not know are ignored, missing ones default."""
        known = {item.name for item in fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in known})

    def replace(self, **changes: Any) -> DetectionSettings:
        """A copy with ``changes`` applied (validated)."""
        return type(self)(**{**self.to_dict(), **changes})


def check_setting(name: str, value: Any) -> None:
    """Raise a ValueError naming ``name`` and its valid range if ``value`` is not a valid setting."""
    if name in ("threshold", "full_threshold"):
        if not _is_real(value) or not 0 < value <= 1:
            raise ValueError(f"{name} must be an accuracy in (0, 1], got {value!r}")
    elif name in ("patience", "validation_size", "recovery_evals", "layers_required"):
        check_int(name, value, 1)
    elif name in ("window", "guard_steps"):
        check_int(name, value, 0)
    elif name in ("noise_units", "min_recovery"):
        if not _is_real(value) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    elif name == "alert_layers":
        if value not in ALERT_LAYERS:
            raise ValueError(f"alert_layers must be one of {', '.join(ALERT_LAYERS)}, got {value!r}")
    elif name == "min_drop":
        if not _is_real(value) or not 0 < value < 1:
            raise ValueError(f"min_drop must be in (0, 1) (a fraction of the peak), got {value!r}")
    elif name == "recovery_fraction":
        if not _is_real(value) or not 0 < value <= 1:
            raise ValueError(f"recovery_fraction must be in (0, 1] (a fraction of the drop), got {value!r}")
    elif name == "smoothing":
        if not _is_int(value) or value < 1 or value % 2 == 0:
            raise ValueError(f"smoothing must be an odd integer >= 1 (a centred window; 1 disables it), got {value!r}")
    elif name == "logprob_threshold":
        if not _is_real(value) or not math.isfinite(value) or value > 0:
            raise ValueError(f"logprob_threshold must be a finite log-probability <= 0 (default log(0.5)), "
                             f"got {value!r}")
    elif name == "measure_transitions":
        if not isinstance(value, Mapping):
            raise ValueError(f"measure_transitions must map tags to one of {', '.join(TRANSITION_KINDS)}, "
                             f"got {type(value).__name__}")
        for tag, kind in value.items():
            if not isinstance(tag, str) or kind not in TRANSITION_KINDS:
                raise ValueError(f"measure_transitions[{tag!r}] = {kind!r}; valid kinds: {', '.join(TRANSITION_KINDS)}")
    else:
        raise ValueError(f"unknown detection setting {name!r}")


def transition_kind(tag: str, kinds: Mapping[str, str]) -> str | None:
    """The transition kind of ``tag``: an exact key of ``kinds``, else the longest matching prefix key."""
    if tag in kinds:
        return kinds[tag]
    prefixes = [key for key in kinds if key.endswith("/") and tag.startswith(key)]
    return kinds[max(prefixes, key=len)] if prefixes else None


def check_int(name: str, value: Any, minimum: int) -> None:
    if not _is_int(value) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


DEFAULT_SETTINGS = DetectionSettings()
