"""The hidden-state measuring unit: the Lightning monitors, the Hugging Face callback and offline analysis all drive
it, so the same batch gives the same RankMe and probe values through each."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer
from torch import nn
from torch.utils.data import DataLoader

from capgeo_callbacks import LinearProbeMonitor, RankMeMonitor
from capgeo_callbacks.capture.unit import HiddenStateUnit, ProbeUnit, RankMeUnit
from capgeo_callbacks.offline import analyze
from tests.offline.conftest import LIVE_TAG, N_SEQ, HFModule, save_rows, tiny_neox

ROWS = 2 * N_SEQ  # the answer positions of the probe rows: two a sequence


def test_units_are_configured_once_and_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="unknown token selector 'middle'"):
        RankMeUnit("middle")
    with pytest.raises(ValueError, match="num_rows must be an integer >= 4"):
        ProbeUnit(num_rows=3)  # half to fit, half to score
    with pytest.raises(ValueError, match="needs labels_fn"):
        ProbeUnit("mean")
    with pytest.raises(ValueError, match="eps must be a positive number"):
        RankMeUnit(eps=0)


def test_hooks_and_given_hidden_states_keep_the_same_rows() -> None:
    """A unit fed by forward hooks and one fed the hidden states a framework returns hold the same rows."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8))
    twin = copy.deepcopy(model)  # no hooks: its layers' outputs are what a framework returns
    batches = [torch.randn(5, 6) for _ in range(3)]
    hooked, given = RankMeUnit("all", 12), RankMeUnit("all", 12)
    hooked.watch(["0", "2"])
    given.watch(["0", "2"])
    hooked.attach(model)
    given.start()
    for batch in batches:
        hooked.update(batch)
        model(batch)
        first = twin[0](batch)
        given.update(batch, {"0": first, "2": twin[2](twin[1](first))})
    assert hooked.compute().values == given.compute().values
    assert all(not module._forward_hooks for module in model.modules())  # compute removes the hooks


def test_a_unit_given_no_selector_or_rows_chooses_them_and_says_only_what_was_asked() -> None:
    """No selector: the first batch's (``target`` for targets of the inputs' shape); no num_rows: 2048, and fewer rows
    measured without a word; a num_rows given and not reached is said."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(11, 8), nn.Linear(8, 8))
    batch = (torch.randint(0, 11, (6, 5)), torch.randint(0, 11, (6, 5)))
    said: list[str] = []
    default, given = RankMeUnit(warn=lambda key, message: said.append(message)), RankMeUnit("target", 64)
    given.warn = lambda key, message: said.append(f"given: {message}")
    for unit in (default, given):
        unit.watch(["1"])
        unit.attach(model)
        unit.update(batch)
    model(batch[0])  # one forward pass, both units' hooks on it
    assert default.selector == "target" and default.config["selector"] == "target" and default.num_rows == 2048
    rows = [unit.compute().rows for unit in (default, given)]
    assert rows[0] == rows[1] and 0 < rows[0]["rankme/1"] < 64
    assert said == [f"given: '1' gave {rows[0]['rankme/1']} rows, fewer than num_rows=64; measured on "
                    f"{rows[0]['rankme/1']} rows"]


def test_the_same_batch_gives_the_same_values_live_under_hugging_face_and_offline(
        hf_revisions: Path, probe_rows: dict[str, torch.Tensor], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    transformers = pytest.importorskip("transformers")
    from capgeo_callbacks.integrations.hf import CapgeoTrainerCallback

    computed: dict[str, list[str]] = {}  # which unit class measured what, by adapter
    adapter = ["lightning"]
    measure = HiddenStateUnit.compute

    def spied(unit: HiddenStateUnit, *args: object, **kwargs: object):  # noqa: ANN202
        result = measure(unit, *args, **kwargs)
        computed.setdefault(adapter[0], []).extend(f"{type(unit).__name__} {tag}" for tag in result.values)
        return result

    monkeypatch.setattr(HiddenStateUnit, "compute", spied)
    folder = hf_revisions / "step100"

    # Lightning: the monitors hooked on the modules of a LightningModule holding the model, in Trainer.validate
    layers = ["lm.gpt_neox.embed_in", "lm.gpt_neox.layers.*", "lm.gpt_neox.final_layer_norm"]
    monitors = [RankMeMonitor(layers=layers, selector="target", num_rows=ROWS),
                LinearProbeMonitor(layers=layers, num_rows=ROWS)]
    lm = transformers.GPTNeoXForCausalLM.from_pretrained(folder, local_files_only=True)
    loader = DataLoader([{k: v[i] for k, v in probe_rows.items()} for i in range(N_SEQ)], batch_size=32)
    Trainer(accelerator="cpu", logger=False, callbacks=monitors, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False).validate(HFModule(lm), dataloaders=loader, verbose=False)
    live = {tag: value for monitor in monitors for tag, value in monitor.values_at(0).items()}

    # Hugging Face: the callback's one pass over the probe rows with output_hidden_states
    adapter[0] = "hugging face"
    callback = CapgeoTrainerCallback(probe_rows, num_rows=ROWS, batch_size=32)
    hf, scalars = callback.measure(tiny_neox(0), "cpu")
    assert set(scalars) == {"val/acc", "val/token_acc", "val/logprob", "val/loss"}

    # offline: the saved revision analysed on the same rows
    adapter[0] = "offline"
    keys = ("input_ids", "targets", "answer_mask")
    summary = analyze(folder, probe_file=save_rows(tmp_path / "rows.pt", probe_rows, keys), selector="target",
                      num_rows=ROWS, probes=True, batch_size=32)
    [revision] = summary["revisions"]
    offline = {**{f"rankme/{label}": value for label, value in revision["rankme"].items()},
               **{f"probe_acc/{label}": value for label, value in revision["probe_acc"].items()}}

    assert set(hf) == set(offline) == {f"{prefix}/{label}" for prefix in ("rankme", "probe_acc") for label in LIVE_TAG}
    for label, module in LIVE_TAG.items():  # Hugging Face's labels, and the modules hooked live
        for prefix in ("rankme", "probe_acc"):
            value = live[f"{prefix}/{module}"]
            assert hf[f"{prefix}/{label}"] == pytest.approx(value, rel=1e-6), (prefix, label)
            assert offline[f"{prefix}/{label}"] == pytest.approx(value, rel=1e-6), (prefix, label)
    assert summary["rows"] == {tag: ROWS for tag in offline} and callback.rows == summary["rows"]
    # every value came from the one unit, through each adapter
    assert computed == {name: [f"{'RankMeUnit' if tag.startswith('rankme/') else 'ProbeUnit'} {tag}" for tag in values]
                        for name, values in (("lightning", live), ("hugging face", hf), ("offline", offline))}
