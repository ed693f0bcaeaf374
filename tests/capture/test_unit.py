"""The hidden-state measuring unit: the Lightning monitors, the Hugging Face callback and offline analysis all drive
it, so the same batch gives the same RankMe, ILDR and probe values through each."""

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
from capgeo_callbacks.measures.ildr import ildr
from capgeo_callbacks.measures.rankme import rankme
from capgeo_callbacks.offline import analyze
from capgeo_callbacks.run.failures import WarnOnce
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
    hooked.detach()  # the hooks are the driver's: removed when it says so
    assert all(not module._forward_hooks for module in model.modules())


def test_compute_reads_the_rows_and_reset_alone_drops_them() -> None:
    """torchmetrics' semantics: ``compute`` twice gives the same values (and leaves the hooks and rows as they are);
    only ``reset`` drops the rows and removes the hooks."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(5, 8), nn.Linear(8, 8))
    unit = RankMeUnit("first_answer", 100)
    unit.watch(["0", "1"])
    unit.attach(model)
    for seed in (1, 2):
        batch = answer_batch(seed)
        unit.update(batch)
        model(batch["input_ids"])
    first, second = unit.compute(), unit.compute()
    assert first.values == second.values and first.rows == second.rows and len(first.values) == 4
    assert unit.is_attached and unit.full
    unit.reset()
    assert not unit.is_attached and unit.compute().values == {}


def test_a_unit_given_no_selector_or_rows_chooses_them_and_says_only_what_was_asked() -> None:
    """No selector: the first batch's (``target`` for targets of the inputs' shape); no num_rows: 2048, and fewer rows
    measured without a word; a num_rows given and not reached is said."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(11, 8), nn.Linear(8, 8))
    batch = (torch.randint(0, 11, (6, 5)), torch.randint(0, 11, (6, 5)))
    said: list[str] = []
    # without ILDR, undefined on 6 rows of 11 classes (test_ildr_of_the_rows_rankme_reads)
    default = RankMeUnit(warn=lambda key, message: said.append(message), ildr_prefix=None)
    given = RankMeUnit("target", 64, ildr_prefix=None)
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
    callback = CapgeoTrainerCallback(probe_rows, num_rows=ROWS, batch_size=32, measures="rankme,ildr,probes")
    model = tiny_neox(0)
    hf, scalars = callback.measure(model, 0)
    assert set(callback.engine.record(0, hf)) == set(hf)
    assert set(scalars) == {"val/acc", "val/token_acc", "val/logprob", "val/loss"}

    # offline: the saved revision analysed on the same rows
    adapter[0] = "offline"
    keys = ("input_ids", "targets", "answer_mask")
    summary = analyze(folder, probe_file=save_rows(tmp_path / "rows.pt", probe_rows, keys), selector="target",
                      num_rows=ROWS, probes=True, batch_size=32)
    [revision] = summary["revisions"]
    measures = ("rankme", "ildr", "probe_acc")
    offline = {f"{prefix}/{label}": value for prefix in measures for label, value in revision[prefix].items()}

    assert set(hf) == set(offline) == {f"{prefix}/{label}" for prefix in measures for label in LIVE_TAG}
    for label, module in LIVE_TAG.items():  # Hugging Face's labels, and the modules hooked live
        for prefix in measures:
            value = live[f"{prefix}/{module}"]
            assert hf[f"{prefix}/{label}"] == pytest.approx(value, rel=1e-6), (prefix, label)
            assert offline[f"{prefix}/{label}"] == pytest.approx(value, rel=1e-6), (prefix, label)
    assert summary["rows"] == {tag: ROWS for tag in offline} and callback.rows == summary["rows"]
    # every value came from the one unit, through each adapter
    unit_of = {"rankme": "RankMeUnit", "ildr": "RankMeUnit", "probe_acc": "ProbeUnit"}
    assert computed == {name: [f"{unit_of[tag.split('/')[0]]} {tag}" for tag in values]
                        for name, values in (("lightning", live), ("hugging face", hf), ("offline", offline))}


def answer_batch(seed: int, examples: int = 64) -> dict[str, torch.Tensor]:
    """capgeo's answer-mask batch: a question of 4 tokens, an answer of 2 (the first: the question's first token)."""
    ids = torch.randint(0, 5, (examples, 7), generator=torch.Generator().manual_seed(seed))
    ids[:, 4] = ids[:, 0]
    mask = torch.zeros(examples, 7, dtype=torch.bool)
    mask[:, 3:5] = True  # positions 3 and 4 predict the answer tokens 4 and 5
    return {"input_ids": ids, "targets": torch.roll(ids, -1, dims=1), "answer_mask": mask}


def test_ildr_of_the_rows_rankme_reads() -> None:
    """ILDR beside RankMe, on the same rows (here one per example, where the first answer token is predicted), classed
    by the target at each row: as the pure function gives it on those rows."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(5, 8), nn.Linear(8, 8))
    batches = [answer_batch(seed) for seed in (1, 2)]
    unit = RankMeUnit("first_answer", 100)
    unit.watch(["0", "1"])
    unit.attach(model)
    for batch in batches:
        unit.update(batch)
        model(batch["input_ids"])
    result = unit.compute()
    assert list(result.values) == ["rankme/0", "rankme/1", "ildr/0", "ildr/1"] and unit.tags == list(result.values)
    assert unit.left_out == {}  # every row had its target
    assert result.rows == dict.fromkeys(result.values, 100)
    ids = torch.cat([batch["input_ids"] for batch in batches])[:100]
    with torch.no_grad():
        rows = model(ids)[:, 3]  # position 3 predicts the first answer token, ids[:, 4]
    assert result.values["ildr/1"] == pytest.approx(ildr(rows, ids[:, 4]), rel=1e-12)
    assert result.values["rankme/1"] == pytest.approx(rankme(rows), rel=1e-12)


def test_rows_without_targets_keep_rankme_and_note_once_without_a_warning_that_ildr_is_left_out() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(5, 8), nn.Linear(8, 8))
    said: list[str] = []
    unit = RankMeUnit("first_answer", 128, warn=WarnOnce(emit=said.append))  # the monitors' warn-once
    unit.watch(["1"])
    plain = {key: value for key, value in answer_batch(3).items() if key != "targets"}  # no targets
    for batches in ([answer_batch(1), plain], [plain, plain]):  # some rows without targets, then none with one
        unit.attach(model)
        for batch in batches:
            unit.update(batch)
            model(batch["input_ids"])
        result = unit.compute()
        unit.reset()
        assert list(result.values) == ["rankme/1"] and result.rows == {"rankme/1": 128}
    assert said == []  # the user asked for RankMe: ILDR's absence is a note for the summary, not a warning
    assert list(unit.left_out) == ["ildr"]
    assert unit.left_out["ildr"].startswith("ILDR needs the target of every row RankMe reads (no targets found")
    assert unit.capture.unlabelled_reason is None  # dropped with the rows

