"""DetectionSettings: defaults, validation at construction, serialisation, replace; transition kinds."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math

import numpy as np
import pytest

from capgeo_callbacks.detection import (
    DEFAULT_SETTINGS,
    MEASURE_TRANSITIONS,
    TRANSITION_KINDS,
    DetectionSettings,
    transition_kind,
)

# The message of each field names it and its valid range.
RANGES = {
    "threshold": r"threshold must be an accuracy in \(0, 1\]",
    "patience": r"patience must be an integer >= 1",
    "full_threshold": r"full_threshold must be an accuracy in \(0, 1\]",
    "validation_size": r"validation_size must be an integer >= 1",
    "window": r"window must be an integer >= 0",
    "min_drop": r"min_drop must be in \(0, 1\)",
    "recovery_fraction": r"recovery_fraction must be in \(0, 1\]",
    "recovery_evals": r"recovery_evals must be an integer >= 1",
    "smoothing": r"smoothing must be an odd integer >= 1",
    "logprob_threshold": r"logprob_threshold must be a finite log-probability <= 0",
    "measure_transitions": r"measure_transitions.*collapse, crossing, change",
    "guard_steps": r"guard_steps must be an integer >= 0",
    "noise_units": r"noise_units must be a finite number >= 0",
    "min_recovery": r"min_recovery must be a finite number >= 0",
    "alert_layers": r"alert_layers must be one of any, deepest",
    "layers_required": r"layers_required must be an integer >= 1",
}

BAD_VALUES = [
    ("threshold", 0), ("threshold", 1.5), ("threshold", math.nan), ("threshold", True), ("threshold", "0.5"),
    ("threshold", -0.1), ("threshold", None),
    ("patience", 0), ("patience", 1.5), ("patience", True), ("patience", 3.0), ("patience", "3"),
    ("full_threshold", 0), ("full_threshold", 1.01), ("full_threshold", math.nan), ("full_threshold", "0.9"),
    ("validation_size", 0), ("validation_size", 512.0), ("validation_size", True),
    ("window", -1), ("window", 1.5), ("window", False),
    ("min_drop", 0), ("min_drop", 1), ("min_drop", -0.1), ("min_drop", math.nan), ("min_drop", True),
    ("recovery_fraction", 0), ("recovery_fraction", 1.1), ("recovery_fraction", math.nan),
    ("recovery_evals", 0), ("recovery_evals", 2.0), ("recovery_evals", True),
    ("smoothing", 0), ("smoothing", 2), ("smoothing", 1.0), ("smoothing", True), ("smoothing", -1),
    ("logprob_threshold", math.inf), ("logprob_threshold", -math.inf), ("logprob_threshold", math.nan),
    ("logprob_threshold", 0.1), ("logprob_threshold", True), ("logprob_threshold", "-0.7"),
    ("measure_transitions", {"llc": "jump"}), ("measure_transitions", {"llc": None}),
    ("measure_transitions", ["llc", "change"]), ("measure_transitions", {3: "change"}),
    ("measure_transitions", "llc"),
    ("guard_steps", -1), ("guard_steps", 1.5), ("guard_steps", True),
    ("noise_units", -1.0), ("noise_units", math.inf), ("noise_units", math.nan), ("noise_units", "3"),
    ("min_recovery", -0.5), ("min_recovery", math.inf), ("min_recovery", None),
    ("alert_layers", "all"), ("alert_layers", None),
    ("layers_required", 0), ("layers_required", 2.0),
]


def test_every_field_has_bad_values_and_a_message() -> None:
    names = {item.name for item in dataclasses.fields(DetectionSettings)}
    assert {name for name, _ in BAD_VALUES} == names == set(RANGES)


@pytest.mark.parametrize(("name", "value"), BAD_VALUES, ids=[f"{n}={v!r}" for n, v in BAD_VALUES])
def test_bad_value_raises_at_construction_naming_field_and_range(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=RANGES[name]):
        DetectionSettings(**{name: value})  # type: ignore[arg-type]


def test_defaults() -> None:
    settings = DetectionSettings()
    assert (settings.threshold, settings.patience, settings.window) == (0.5, 3, 3)
    assert (settings.min_drop, settings.recovery_fraction, settings.recovery_evals, settings.smoothing) == (
        0.25, 0.10, 2, 3)
    assert settings.logprob_threshold == math.log(0.5)
    assert settings.measure_transitions == MEASURE_TRANSITIONS
    assert settings.measure_transitions is not MEASURE_TRANSITIONS  # a copy, not the module's table
    assert settings == DEFAULT_SETTINGS


def test_boundary_values_are_valid() -> None:
    settings = DetectionSettings(threshold=1, patience=1, window=0, min_drop=0.999, recovery_fraction=1,
                                 recovery_evals=1, smoothing=1, logprob_threshold=0, measure_transitions={})
    assert settings.threshold == 1.0 and settings.recovery_fraction == 1.0 and settings.logprob_threshold == 0.0
    assert settings.measure_transitions == {}


def test_numpy_values_are_stored_as_plain_python() -> None:
    settings = DetectionSettings(threshold=np.float32(0.5), patience=np.int64(3), window=np.int32(3),
                                 smoothing=np.int64(3), min_drop=np.float64(0.25))
    assert settings == DetectionSettings()
    assert type(settings.threshold) is float and type(settings.min_drop) is float
    assert type(settings.patience) is int and type(settings.window) is int and type(settings.smoothing) is int
    assert type(DetectionSettings(threshold=1).threshold) is float
    json.dumps(settings.to_dict(), allow_nan=False)


def test_frozen() -> None:
    settings = DetectionSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.window = 5  # type: ignore[misc]


def test_measure_transitions_cannot_be_changed_after_validation() -> None:
    settings = DetectionSettings()
    with contextlib.suppress(TypeError):  # refusing the change is fine too
        settings.measure_transitions["llc"] = "jump"  # type: ignore[index]
    assert settings.measure_transitions["llc"] == "change"


def test_to_dict_from_dict_round_trip() -> None:
    settings = DetectionSettings(threshold=0.8, patience=2, window=5, min_drop=0.4, recovery_fraction=0.3,
                                 recovery_evals=4, smoothing=5, logprob_threshold=-0.2,
                                 measure_transitions={"llc": "collapse", "probe_acc/": "crossing"})
    values = settings.to_dict()
    assert values == {"threshold": 0.8, "patience": 2, "window": 5, "min_drop": 0.4, "recovery_fraction": 0.3,
                      "recovery_evals": 4, "smoothing": 5, "logprob_threshold": -0.2,
                      "measure_transitions": {"llc": "collapse", "probe_acc/": "crossing"}, "guard_steps": 0,
                      "noise_units": 0.0, "min_recovery": 0.0, "alert_layers": "any", "layers_required": 1,
                      "full_threshold": 0.9, "validation_size": 512}
    assert DetectionSettings.from_dict(values) == settings
    assert DetectionSettings.from_dict(json.loads(json.dumps(values, allow_nan=False))) == settings
    assert DetectionSettings.from_dict(DetectionSettings().to_dict()) == DetectionSettings()
    values["measure_transitions"]["llc"] = "change"  # to_dict hands out a copy
    assert settings.measure_transitions["llc"] == "collapse"


def test_from_dict_ignores_unknown_keys_defaults_missing_ones_and_validates() -> None:
    assert DetectionSettings.from_dict({"window": 5, "a_later_setting": 1}) == DetectionSettings(window=5)
    assert DetectionSettings.from_dict({}) == DetectionSettings()
    with pytest.raises(ValueError, match=RANGES["window"]):
        DetectionSettings.from_dict({"window": -1})


def test_replace_applies_changes_and_validates() -> None:
    settings = DetectionSettings(min_drop=0.4)
    wider = settings.replace(window=5, smoothing=1)
    assert (wider.window, wider.smoothing, wider.min_drop) == (5, 1, 0.4)
    assert wider == DetectionSettings(min_drop=0.4, window=5, smoothing=1)
    assert (settings.window, settings.smoothing) == (3, 3)  # the original is unchanged
    with pytest.raises(ValueError, match=RANGES["window"]):
        settings.replace(window=-1)
    with pytest.raises(ValueError, match=RANGES["measure_transitions"]):
        settings.replace(measure_transitions={"llc": "jump"})
    with pytest.raises(TypeError):
        settings.replace(until_step=5)


def test_old_keyword_names_are_not_settings() -> None:
    with pytest.raises(TypeError):
        DetectionSettings(until_step=5)  # type: ignore[call-arg]


def test_transition_kinds() -> None:
    assert TRANSITION_KINDS == ("collapse", "crossing", "change")
    assert set(MEASURE_TRANSITIONS.values()) <= set(TRANSITION_KINDS)
    assert transition_kind("rankme/blocks.0", MEASURE_TRANSITIONS) == "collapse"
    assert transition_kind("probe_acc/final", MEASURE_TRANSITIONS) == "crossing"
    assert transition_kind("llc", MEASURE_TRANSITIONS) == "change"
    assert transition_kind("hessian/eig_0", MEASURE_TRANSITIONS) == "change"
    assert transition_kind("grad_erank", MEASURE_TRANSITIONS) == "collapse"
    # only keys ending in "/" are prefixes
    assert transition_kind("llc/chain_0", MEASURE_TRANSITIONS) is None
    assert transition_kind("hessian/eig_1", MEASURE_TRANSITIONS) is None
    assert transition_kind("rankme", MEASURE_TRANSITIONS) is None


def test_transition_kind_exact_key_then_longest_prefix() -> None:
    kinds = {"a/": "collapse", "a/b/": "crossing", "a/b/c": "change"}
    assert transition_kind("a/b/c", kinds) == "change"
    assert transition_kind("a/b/d", kinds) == "crossing"
    assert transition_kind("a/x", kinds) == "collapse"
    assert transition_kind("a", kinds) is None
    assert transition_kind("b/c", kinds) is None
    assert transition_kind("a/b/c", {}) is None
