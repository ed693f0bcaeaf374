"""Hugging Face revisions analysed offline against a live ``RankMeMonitor`` on the same weights.

Tiny random GPTNeoX revisions saved with ``save_pretrained`` are analysed offline; the RankMe of each layer
is compared with a live ``RankMeMonitor`` hooked on the same modules of the same models inside
``Trainer.validate``.
"""

from __future__ import annotations

import logging
import sys

import pytest
import torch

from capgeo_callbacks.integrations.hf_models import hf_layer_labels
from capgeo_callbacks.offline import analyze
from tests.offline.conftest import LIVE_TAG, N_LAYERS, REL, live_values, rel_diff, save_rows, tiny_neox

pytest.importorskip("transformers")


def test_hf_revisions_give_the_live_callbacks_rankme(hf_revisions, probe_rows, tmp_path, caplog) -> None:
    probe = save_rows(tmp_path / "rows.pt", probe_rows, ("input_ids",))
    with caplog.at_level(logging.WARNING, logger="capgeo"):
        summary = analyze(hf_revisions, probe_file=probe, num_rows=64, batch_size=32)

    assert [r["name"] for r in summary["revisions"]] == ["step100", "step200", "step300", "step1000"]
    assert summary["analysis"]["layers"] == list(LIVE_TAG) == hf_layer_labels(N_LAYERS + 1, N_LAYERS)
    assert summary["analysis"]["selector"] == "last"  # no answer_mask in the probe file
    assert "after the final layer norm" in summary["analysis"]["layer_note"]
    assert summary["rows"] == {f"rankme/{label}": 64 for label in LIVE_TAG}
    assert summary["selectors"] == {"rankme": "last"}
    worst = 0.0
    for entry in summary["revisions"][:3]:
        live = live_values(hf_revisions / entry["name"], probe_rows, "last", 64)
        for label, tag in LIVE_TAG.items():
            assert entry["rankme"][label] == pytest.approx(live[tag], rel=REL), (entry["name"], label)
            worst = max(worst, rel_diff(entry["rankme"][label], live[tag]))
        # the raw output of the last block is another tensor than the final-normed hidden state
        assert live["layers.2"] != pytest.approx(live["final_layer_norm"], rel=1e-3)
    print(f"HF offline vs live RankMe: worst relative difference {worst:.1e}")

    # the duplicate revision is flagged, reuses the earlier values, and is warned about
    assert summary["revisions"][3]["duplicate_of"] == "step200"
    assert summary["revisions"][3]["rankme"] == summary["revisions"][1]["rankme"]
    assert [d["revisions"] for d in summary["duplicate_weights"]] == [["step200", "step1000"]]
    assert any("identical weights" in r.message for r in caplog.records)
    assert any("identical weights" in w for w in summary["warnings"])
    assert len({r["weights_sha256"] for r in summary["revisions"]}) == 3
    # detection ran over the series, in the summary's shape, with the default settings
    assert [p[0] for p in summary["series"]["rankme/layers.0"]] == [100, 200, 300, 1000]
    assert summary["verdict"] == "not-acquired" and set(summary["layers"]) == set(LIVE_TAG)
    assert summary["steps"] == 1000 and summary["monitor"] == "val/acc"  # scored on the probe rows, as live
    assert summary["analysis"]["recorded"]["settings"] == "default"

    dropped = analyze(hf_revisions, probe_file=probe, num_rows=64, drop_duplicates=True)
    assert [r["name"] for r in dropped["revisions"]] == ["step100", "step200", "step300"]
    assert dropped["skipped_revisions"][0]["name"] == "step1000"


def test_answer_mask_selects_answer_rows_and_scores_the_answer(hf_revisions, probe_rows, tmp_path) -> None:
    probe = save_rows(tmp_path / "rows.pt", probe_rows, ("input_ids", "targets", "answer_mask"))
    summary = analyze(hf_revisions / "step300", probe_file=probe, num_rows=150, probes=True, batch_size=32)
    assert summary["analysis"]["selector"] == "answer"
    entry = summary["revisions"][0]
    live = live_values(hf_revisions / "step300", probe_rows, "answer", 150, probes=True)
    for label, tag in LIVE_TAG.items():
        assert entry["rankme"][label] == pytest.approx(live[tag], rel=REL)
        # the same rows and labels, fit and scored the same way: the same count of right answers
        assert entry["probe_acc"][label] == live[f"probe_acc/{tag}"], label
    # exact match of the answer over the probe examples, as capgeo's val/acc
    lm = tiny_neox(2)
    with torch.inference_mode():
        logits = lm(input_ids=probe_rows["input_ids"]).logits
    right = (logits.argmax(-1) == probe_rows["targets"]) | ~probe_rows["answer_mask"]
    assert entry["acc"] == pytest.approx(right.all(dim=1).float().mean().item(), abs=1e-12)
    assert set(entry["probe_acc"]) == set(LIVE_TAG)
    assert summary["rows"] == {f"{p}/{label}": 150 for p in ("rankme", "ildr", "probe_acc") for label in LIVE_TAG}
    assert summary["selectors"] == {"rankme": "answer", "probe_acc": "answer"}


def test_answer_selector_without_a_mask_says_what_to_pass(hf_revisions, probe_rows, tmp_path) -> None:
    probe = save_rows(tmp_path / "rows.pt", probe_rows, ("input_ids",))
    with pytest.raises(ValueError, match="needs 'answer_mask' in the probe set.*--selector last"):
        analyze(hf_revisions / "step100", probe_file=probe, selector="answer")
    with pytest.raises(ValueError, match="match none of embed"):
        analyze(hf_revisions / "step100", probe_file=probe, layers=["blocks.*"])


def test_missing_transformers_names_the_extra(hf_revisions, probe_rows, tmp_path, monkeypatch) -> None:
    probe = save_rows(tmp_path / "rows.pt", probe_rows, ("input_ids",))
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"capgeo-callbacks\[hf\]"):
        analyze(hf_revisions, probe_file=probe)


def test_hf_layer_labels() -> None:
    assert hf_layer_labels(3, 2) == ["embed", "layers.0", "layers.1+final_norm"]
    assert hf_layer_labels(4, 2) == ["hidden_states.0", "hidden_states.1", "hidden_states.2", "hidden_states.3"]
