"""The measure registry: capgeo's measures as registry entries, the conformance test every entry passes (built
from its defaults, writes exactly the keys it declares on a real Trainer run, its options round-trip), what is
generated from it (train.py's --measures, docs/measures.md, detection's transition kinds), and a user's own
measure added in this one file: the mean L2 norm of the hidden states per layer."""

from __future__ import annotations

import importlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
import yaml
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.loggers import Logger
from torch import Tensor

import train
import train_cli
from capgeo_callbacks import (
    DetectionSettings,
    HiddenStateMonitor,
    MeasureCallback,
    MeasureSpec,
    RowMeasure,
    get_measure,
    register_measure,
    unregister_measure,
)
from capgeo_callbacks.capture.layers import DEFAULT_LAYERS
from capgeo_callbacks.capture.selectors import Selector
from capgeo_callbacks.detection.settings import MEASURE_TRANSITIONS, transition_kind
from capgeo_callbacks.registry import (
    BUILTIN_MEASURES,
    build_measure_callbacks,
    key_pattern,
    measure_names,
    measure_transitions,
    measures_markdown,
    resolve_measures,
)
from tests.callbacks.helpers import TinyAnswerLM, answer_loaders

ROOT = Path(__file__).resolve().parents[2]


# -- a user's measure, in this one file: the function of a layer's rows, its monitor, its registry entry -----------
def mean_l2_norm(z: Tensor, labels: Tensor | None = None) -> float:
    """The mean Euclidean norm of the rows of ``z`` (N x D), in float64 (it reads no labels)."""
    return float(z.double().norm(dim=1).mean())


class NormMonitor(HiddenStateMonitor):
    """Log the mean L2 norm of each watched layer's hidden states, on the validation pass.

    Logged keys:
        ``norm/<layer>`` for each watched layer.
    """

    row_measures = (RowMeasure("norm", mean_l2_norm),)

    def __init__(self, layers: str | list[str] | tuple[str, ...] = DEFAULT_LAYERS,
                 selector: Selector = "first_answer", num_rows: int = 512, every_n_evals: int = 1,
                 mask_key: str = "answer_mask", prefix: str = "norm") -> None:
        super().__init__(layers, selector, num_rows, every_n_evals, mask_key, prefix)


NORM = MeasureSpec(name="norm", callback=NormMonitor, needs="hidden_states", cost="cheap", keys=("norm/<layer>",),
                   options={"num_rows": 128}, transitions={"norm/": "change"}, functions=("mean_l2_norm",),
                   description="mean L2 norm of each watched layer's hidden states")


@pytest.fixture
def norm_registered() -> Iterator[MeasureSpec]:
    register_measure(NORM)
    try:
        yield NORM
    finally:
        unregister_measure("norm")


# -- a tiny real Trainer run that records every key its loggers receive ----------------------------------------
class KeyLogger(Logger):
    """Records every key of every ``log_metrics`` call."""

    def __init__(self) -> None:
        super().__init__()
        self.metrics: dict[str, list[tuple[int, float]]] = {}

    @property
    def name(self) -> str:
        return "keys"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        for key, value in metrics.items():
            self.metrics.setdefault(key, []).append((step or 0, float(value)))


def fit_once(path: Path, callback: pl.Callback) -> tuple[TinyAnswerLM, KeyLogger]:
    """Eight training steps of a tiny answer LM (256 examples seen: every fixed batch fills), one validation
    at the end; the model's own ``val_acc`` is logged through Lightning too."""
    seed_everything(0, verbose=False)
    model, logger = TinyAnswerLM(), KeyLogger()
    trainer = Trainer(max_steps=8, val_check_interval=8, logger=logger, callbacks=[callback], default_root_dir=path,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                      num_sanity_val_steps=1, accelerator="cpu", deterministic=True)
    trainer.fit(model, *answer_loaders())
    return model, logger


def options_of(callback: pl.Callback, names: Any) -> dict[str, Any]:
    """The constructor arguments ``names`` read back from a callback (scikit-learn's ``get_params``)."""
    def read(name: str) -> Any:
        value = callback.layer_patterns if name == "layers" else getattr(callback, name)
        return list(value) if isinstance(value, tuple) else value

    return {name: read(name) for name in names}


# -- the conformance test: every registered measure, capgeo's and the user's --------------------------------
@pytest.mark.parametrize("spec", [*BUILTIN_MEASURES, NORM], ids=lambda spec: spec.name)
def test_every_measure_builds_from_its_defaults_writes_its_keys_and_round_trips(spec: MeasureSpec,
                                                                                tmp_path: Path) -> None:
    """A measure computed on another's rows (ILDR on RankMe's) is built into that measure's callback: it writes its
    own keys beside the other's."""
    carrier = get_measure(spec.rows_of) if spec.rows_of else None
    callback = build_measure_callbacks([carrier.name, spec.name])[0] if carrier else spec.build()
    assert isinstance(callback, spec.callback) and isinstance(callback, MeasureCallback)
    assert callback.every_n_evals == spec.every_n_evals

    # its options round-trip: read back from the callback, and through a LightningCLI config (YAML, class_path)
    options = spec.callback_options()
    plain = spec.config()["init_args"]
    assert options_of(callback, options) == plain
    config = yaml.safe_load(yaml.safe_dump(spec.config()))
    assert json.loads(json.dumps(config)) == config  # plain typed values only
    module, _, name = config["class_path"].rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**config["init_args"])
    assert options_of(rebuilt, options) == plain and rebuilt.state_key == callback.state_key

    # on a real Trainer it writes exactly the keys it declares, to the loggers and its own series
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit_once(tmp_path, callback)
    failures = [str(w.message) for w in caught if "failed" in str(w.message) or "skipped" in str(w.message)]
    assert failures == []
    written = set(callback.series)
    assert written and written == set(callback.tags)
    assert all(spec.writes(key, optional=False) or (carrier and carrier.writes(key)) for key in written), written
    for pattern in spec.keys:  # each declared key is written
        assert any(key_pattern(pattern).fullmatch(key) for key in written), (pattern, written)
    # every series is evaluated at the one validation, step 8, and logged there too
    assert {tag: [step for step, _ in points] for tag, points in callback.series.items()} == {t: [8] for t in written}


def test_the_registry_holds_capgeos_measures_with_their_measured_defaults() -> None:
    assert measure_names()[:8] == ("rankme", "ildr", "probes", "weight_norm", "grad_rank", "hessian", "llc",
                                   "commutator")
    assert [spec.name for spec in BUILTIN_MEASURES if spec.default] == ["rankme", "ildr", "probes", "weight_norm"]
    assert {spec.name: spec.cost for spec in BUILTIN_MEASURES} == {
        "rankme": "cheap", "ildr": "cheap", "probes": "cheap", "weight_norm": "cheap", "grad_rank": "costly",
        "hessian": "costly", "llc": "costly", "commutator": "costly"}
    assert {spec.name: spec.needs for spec in BUILTIN_MEASURES} == {
        "rankme": "hidden_states", "ildr": "hidden_states", "probes": "hidden_states", "weight_norm": "parameters",
        "grad_rank": "per_example_gradients", "hessian": "loss_closure", "llc": "loss_closure",
        "commutator": "loss_closure"}
    # the cadences and options train.py has used (measured choices, README "The corpus"); ILDR on RankMe's rows
    assert {spec.name: spec.rows_of for spec in BUILTIN_MEASURES if spec.rows_of} == {"ildr": "rankme"}
    assert {spec.name: spec.callback_options() for spec in BUILTIN_MEASURES} == {
        "rankme": {"every_n_evals": 1, "ildr_prefix": None},
        "ildr": {"every_n_evals": 1, "ildr_prefix": "ildr"},
        "probes": {"every_n_evals": 4},
        "weight_norm": {"every_n_evals": 1},
        "grad_rank": {"every_n_evals": 4, "batch_size": 64},
        "hessian": {"every_n_evals": 16, "k": 1, "num_iterations": 20, "batch_size": 64},
        "llc": {"every_n_evals": 32, "num_chains": 2, "num_draws": 50, "batch_size": 64, "num_batches": 2},
        "commutator": {"every_n_evals": 8, "batch_size": 64, "num_pairs": 1},
    }
    assert [key for spec in BUILTIN_MEASURES for key in spec.keys] == [
        "rankme/<layer>", "ildr/<layer>", "probe_acc/<layer>", "weight_norm/global", "weight_norm/<layer>",
        "grad_erank", "grad_cov_rank", "grad_cov_numerical_rank",
        "hessian/eig_<i>", "llc", "llc_std", "llc_fraction_below_init", "commutator/defect"]


def test_transition_kinds_agree_with_detections_default() -> None:
    assert measure_transitions(BUILTIN_MEASURES) == MEASURE_TRANSITIONS
    assert measure_transitions(BUILTIN_MEASURES) == DetectionSettings().measure_transitions
    kinds = measure_transitions(BUILTIN_MEASURES)
    for key, expected in [("rankme/blocks.0", "collapse"), ("probe_acc/norm_f", "crossing"),
                          ("grad_erank", "collapse"), ("hessian/eig_0", "change"), ("llc", "change"),
                          ("hessian/eig_1", None), ("llc_std", None), ("weight_norm/global", "change")]:
        assert transition_kind(key, kinds) == transition_kind(key, MEASURE_TRANSITIONS) == expected


def test_docs_measures_md_is_current() -> None:
    committed = (ROOT / "docs" / "measures.md").read_text()
    assert committed == measures_markdown(BUILTIN_MEASURES), (
        "docs/measures.md is stale: python -m capgeo_callbacks.registry --write docs/measures.md")
    for spec in BUILTIN_MEASURES:  # every logged key is listed
        for key in (*spec.keys, *spec.optional_keys):
            assert f"| `{key}` | `{spec.name}` |" in committed


def test_the_markdown_command_prints_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    from capgeo_callbacks.registry.__main__ import main

    assert main(["--markdown"]) == 0
    assert capsys.readouterr().out == measures_markdown(BUILTIN_MEASURES)


def test_train_py_measures_come_from_the_registry() -> None:
    assert measure_names() == train.MEASURES
    assert train.DEFAULT_MEASURES == ("rankme", "ildr", "probes", "weight_norm")
    for spec in BUILTIN_MEASURES:  # the registry's cadence and options, with train.py's layers and rows
        expected = {**spec.callback_options(), **train.LAYERS_AND_ROWS.get(spec.name, {})}
        assert train.MEASURE_OPTIONS[spec.name] == expected
        assert train.MEASURE_CALLBACKS[spec.name] is spec.callback
    help_text = " ".join(train_cli.measures_help().split())
    assert "'default' (rankme, ildr, probes, weight_norm)" in help_text
    assert "grad_rank, hessian, llc, commutator (costly)" in help_text


@pytest.mark.parametrize(("spec", "names"), [
    ("default", ["rankme", "ildr", "probes", "weight_norm"]), ("none", []),
    ("all", ["rankme", "ildr", "probes", "weight_norm", "grad_rank", "hessian", "llc", "commutator"]),
    ("llc, rankme", ["llc", "rankme"]),
    ("default,commutator", ["rankme", "ildr", "probes", "weight_norm", "commutator"]),  # a preset and a name
    ("rankme,default,rankme", ["rankme", "ildr", "probes", "weight_norm"]),  # each name once, in the order given
])
def test_resolve_measures(spec: str, names: list[str]) -> None:
    assert resolve_measures(spec) == train_cli.resolve_measures(spec) == names


def test_ildr_rides_on_rankmes_rows_and_only_with_rankme() -> None:
    [both] = build_measure_callbacks(["ildr", "rankme"])
    [alone] = build_measure_callbacks(["rankme"])
    assert (both.ildr_prefix, alone.ildr_prefix) == ("ildr", None)  # one monitor, one capture of the rows
    with pytest.raises(ValueError, match="ildr is measured on the rows of 'rankme': choose that measure too"):
        build_measure_callbacks(["ildr", "probes"])
    with pytest.raises(ValueError, match="rows_of='nope' must name a measure registered before it"):
        register_measure(MeasureSpec(name="x", callback=NormMonitor, rows_of="nope", needs="hidden_states",
                                     cost="cheap", keys=("x/<layer>",), options={"prefix": "x"}))


def test_the_earlier_measure_rows_still_measures_and_warns_that_it_is_deprecated(tmp_path: Path) -> None:
    class OldNorm(HiddenStateMonitor):
        def measure_rows(self, name: str, rows: Tensor, labels: Tensor | None, step: int) -> float | None:
            return mean_l2_norm(rows)

    with pytest.warns(DeprecationWarning, match="OldNorm.measure_rows is deprecated: define the measure as RowMeasure"):
        old = OldNorm(layers=["blocks.0", "norm_f"], selector="first_answer", num_rows=128, prefix="norm")
    new = NormMonitor(layers=["blocks.0", "norm_f"], num_rows=128)
    fit_once(tmp_path / "old", old)
    fit_once(tmp_path / "new", new)
    assert old.series == new.series and set(old.series) == {"norm/blocks.0", "norm/norm_f"}


def test_bad_specs_and_names_are_errors_that_say_what_is_right() -> None:
    with pytest.raises(ValueError, match=r"unknown measure\(s\) bogus; valid: default, none, all, .*llc"):
        resolve_measures("rankme,bogus")
    with pytest.raises(ValueError, match="already registered"):
        register_measure(get_measure("rankme"))
    with pytest.raises(KeyError, match="unknown measure 'nope'; registered: rankme"):
        get_measure("nope")
    base = {"name": "x", "callback": NormMonitor, "needs": "hidden_states", "cost": "cheap", "keys": ("norm/<layer>",)}
    for change, message in [
        ({"name": "all"}, "not one of default, none, all"),
        ({"name": "Bad-Name"}, "lower case"),
        ({"callback": pl.Callback}, "MeasureCallback subclass"),
        ({"needs": "weights"}, "needs must be one of hidden_states, per_example_gradients, loss_closure"),
        ({"cost": "free"}, "cost must be one of cheap, costly"),
        ({"keys": ()}, "at least one"),
        ({"every_n_evals": 0}, "every_n_evals must be an integer >= 1"),
        ({"options": {"every_n_evals": 2}}, "cadence"),
        ({"options": {"num_row": 8}}, "NormMonitor takes no argument.* num_row"),
        ({"transitions": {"norm/": "dip"}}, "collapse, crossing, change"),
        ({"transitions": {"rankme/": "collapse"}}, "none of its keys"),
    ]:
        with pytest.raises(ValueError, match=message):
            MeasureSpec(**{**base, **change})


# -- the user's measure: registered, train.py takes it, its values are the direct computation ---------------------
def test_a_users_measure_plugs_into_train_py(norm_registered: MeasureSpec) -> None:
    assert resolve_measures("rankme,norm") == train_cli.resolve_measures("rankme,norm") == ["rankme", "norm"]
    assert train_cli.resolve_measures("all")[-1] == "norm" and "norm" not in train_cli.resolve_measures("default")
    assert "rankme, ildr, probes, weight_norm, norm (cheap)" in train_cli.measures_help()
    callbacks = train.build_measure_callbacks(["norm", "rankme"], run_info={})
    assert [type(cb).__name__ for cb in callbacks] == ["RankMeMonitor", "NormMonitor", "PrecursorDetector"]
    assert callbacks[1].num_rows == 128  # its registry defaults (train.py has no options of its own for it)
    detector = callbacks[-1]
    assert detector.settings.measure_transitions == {**MEASURE_TRANSITIONS, "norm/": "change"}
    # a run without it is built exactly as before it was registered
    assert train.build_measure_callbacks(["rankme"], run_info={})[-1].settings == train.SETTINGS
    [alone] = build_measure_callbacks(["norm"], {"norm": {"num_rows": 64}})  # the library's, without train.py
    assert isinstance(alone, NormMonitor) and alone.num_rows == 64


def test_the_users_measure_equals_the_direct_computation(tmp_path: Path) -> None:
    monitor = NormMonitor(layers=["blocks.0", "norm_f"], num_rows=128)
    model, logger = fit_once(tmp_path, monitor)
    # directly: the hidden states of the validation set at the position that predicts the first answer token
    hidden: dict[str, list[Tensor]] = {"blocks.0": [], "norm_f": []}
    modules = dict(model.named_modules())
    handles = [modules[name].register_forward_hook(lambda m, i, out, name=name: hidden[name].append(out))
               for name in hidden]
    first: list[Tensor] = []
    try:
        model.eval()
        with torch.no_grad():
            for batch in answer_loaders()[1]:
                model(batch["input_ids"])
                first.append(batch["answer_mask"].int().argmax(dim=1))
    finally:
        for handle in handles:
            handle.remove()
    positions = torch.cat(first)
    for name, outputs in hidden.items():
        states = torch.cat(outputs)[torch.arange(len(positions)), positions]  # (128, d_model)
        expected = states.double().norm(dim=1).mean().item()
        assert monitor.series[f"norm/{name}"] == [[8, pytest.approx(expected, rel=1e-6)]]
        assert logger.metrics[f"norm/{name}"][-1][1] == pytest.approx(expected, rel=1e-6)
        assert mean_l2_norm(states) == pytest.approx(expected, rel=1e-12)


@pytest.mark.slow
def test_train_py_runs_the_users_measure_end_to_end(norm_registered: MeasureSpec, tmp_path: Path) -> None:
    summary = train.main(["--task", "mod", "--difficulty", "easy", "--max-steps", "4", "--eval-points", "3",
                          "--measures", "rankme,norm", "--no-progress", "--logdir", str(tmp_path),
                          "--overhead-budget", "0"])  # the budget off: every norm point
    assert summary["measure_names"] == ["rankme", "norm"]
    series = summary["series"]
    assert {"norm/norm_f", "rankme/norm_f"} <= set(series)
    assert len(series["norm/norm_f"]) == len(series["rankme/norm_f"])
    assert summary["settings"]["measure_transitions"]["norm/"] == "change"
    assert summary["measures"]["norm/norm_f"]["kind"] == "change"
