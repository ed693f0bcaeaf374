"""Offline analysis (``python -m capgeo_callbacks.analyze``) against the live callbacks on the same weights.

Hugging Face: tiny random GPTNeoX revisions saved with ``save_pretrained`` are analysed offline and the
RankMe per layer is compared with a live ``RankMeMonitor`` hooked on the same modules of the same models
inside ``Trainer.validate``. Lightning: checkpoints saved during a real fit (and a real ``train.py``
run) are analysed offline and compared with the series the live monitors recorded at the same steps.
"""

from __future__ import annotations

import ast
import json
import logging
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch import Callback, Trainer, seed_everything
from torch.utils.data import DataLoader

from capgeo_callbacks import PrecursorDetector, RankMeMonitor
from capgeo_callbacks.analyze import (
    analyze,
    find_revisions,
    hf_layer_labels,
    main,
    resolve_dotted,
    weights_sha256,
)
from capgeo_callbacks.callbacks.linear_probe_monitor import LinearProbeMonitor

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
REL = 1e-6
N_LAYERS, VOCAB, SEQ, N_SEQ = 3, 64, 12, 96
# offline label -> live RankMeMonitor tag (module names with the shared "lm.gpt_neox." dropped)
LIVE_TAG = {"embed": "embed_in", "layers.0": "layers.0", "layers.1": "layers.1",
            "layers.2+final_norm": "final_layer_norm"}


def tiny_neox(seed: int) -> Any:
    config = transformers.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=N_LAYERS,
                                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(seed)
    return transformers.GPTNeoXForCausalLM(config).eval()


@pytest.fixture(scope="module")
def hf_revisions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """step100..step300 from seeds 0..2, and step1000 a copy of step200 (a duplicate, and 1000 sorts after 300
    only by number)."""
    root = tmp_path_factory.mktemp("hf") / "revisions"
    for name, seed in (("step100", 0), ("step200", 1), ("step300", 2), ("step1000", 1)):
        tiny_neox(seed).save_pretrained(root / name)
    return root


@pytest.fixture(scope="module")
def probe_rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (N_SEQ, SEQ + 1), generator=g)
    mask = torch.zeros(N_SEQ, SEQ, dtype=torch.bool)
    mask[:, -2:] = True  # the last two positions are the "answer"
    return {"input_ids": ids[:, :-1], "targets": ids[:, 1:], "answer_mask": mask}


def save_rows(path: Path, rows: dict[str, torch.Tensor], keys: tuple[str, ...]) -> Path:
    torch.save({key: rows[key] for key in keys}, path)
    return path


class HFModule(pl.LightningModule):
    """A Hugging Face causal LM inside a LightningModule: what a user attaching the live callbacks has."""

    def __init__(self, lm: torch.nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.lm(input_ids=batch["input_ids"])


def live_rankme(folder: Path, rows: dict[str, torch.Tensor], selector: str, num_rows: int) -> dict[str, float]:
    """RankMe per layer from the live callback, validating the saved revision in a real Trainer."""
    monitor = RankMeMonitor(layers=["lm.gpt_neox.embed_in", "lm.gpt_neox.layers.*", "lm.gpt_neox.final_layer_norm"],
                            selector=selector, num_rows=num_rows)
    lm = transformers.GPTNeoXForCausalLM.from_pretrained(folder, local_files_only=True)
    loader = DataLoader([{k: v[i] for k, v in rows.items()} for i in range(N_SEQ)], batch_size=32)
    trainer = Trainer(accelerator="cpu", logger=False, callbacks=[monitor], enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.validate(HFModule(lm), dataloaders=loader, verbose=False)
    return {tag.split("/", 1)[1]: value for tag, value in monitor.values_at(0).items()}


def rel_diff(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def test_hf_revisions_give_the_live_callbacks_rankme(hf_revisions, probe_rows, tmp_path, caplog) -> None:
    probe = save_rows(tmp_path / "rows.pt", probe_rows, ("input_ids",))
    with caplog.at_level(logging.WARNING, logger="capgeo"):
        summary = analyze(hf_revisions, probe_file=probe, num_rows=64, batch_size=32)

    assert [r["name"] for r in summary["revisions"]] == ["step100", "step200", "step300", "step1000"]
    assert summary["analysis"]["layers"] == list(LIVE_TAG) == hf_layer_labels(N_LAYERS + 1, N_LAYERS)
    assert summary["analysis"]["selector"] == "last"  # no answer_mask in the probe file
    assert "after the final layer norm" in summary["analysis"]["layer_note"]
    assert summary["rankme_rows"] == dict.fromkeys(LIVE_TAG, 64)
    worst = 0.0
    for entry in summary["revisions"][:3]:
        live = live_rankme(hf_revisions / entry["name"], probe_rows, "last", 64)
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
    # detection ran over the series, in the summary's shape
    assert [p[0] for p in summary["series"]["rankme/layers.0"]] == [100, 200, 300, 1000]
    assert summary["verdict"] == "not-acquired" and set(summary["layers"]) == set(LIVE_TAG)

    dropped = analyze(hf_revisions, probe_file=probe, num_rows=64, drop_duplicates=True)
    assert [r["name"] for r in dropped["revisions"]] == ["step100", "step200", "step300"]
    assert dropped["skipped_revisions"][0]["name"] == "step1000"


def test_answer_mask_selects_answer_rows_and_scores_the_answer(hf_revisions, probe_rows, tmp_path) -> None:
    probe = save_rows(tmp_path / "rows.pt", probe_rows, ("input_ids", "targets", "answer_mask"))
    summary = analyze(hf_revisions / "step300", probe_file=probe, num_rows=150, probes=True, batch_size=32)
    assert summary["analysis"]["selector"] == "answer"
    entry = summary["revisions"][0]
    live = live_rankme(hf_revisions / "step300", probe_rows, "answer", 150)
    for label, tag in LIVE_TAG.items():
        assert entry["rankme"][label] == pytest.approx(live[tag], rel=REL)
    # exact match of the answer over the probe examples, as capgeo's val/acc
    lm = tiny_neox(2)
    with torch.inference_mode():
        logits = lm(input_ids=probe_rows["input_ids"]).logits
    right = (logits.argmax(-1) == probe_rows["targets"]) | ~probe_rows["answer_mask"]
    assert entry["acc"] == pytest.approx(right.all(dim=1).float().mean().item(), abs=1e-12)
    assert set(entry["probe_acc"]) == set(LIVE_TAG)
    assert all(0.0 <= v <= 1.0 for v in entry["probe_acc"].values())


def test_cli_writes_summary_and_table(hf_revisions, probe_rows, tmp_path, capsys) -> None:
    probe = save_rows(tmp_path / "rows.pt", probe_rows, ("input_ids",))
    out = tmp_path / "summary.json"
    code = main([str(hf_revisions), "--probe-file", str(probe), "--num-rows", "64", "--layers", "layers.*",
                 "--output", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "layers.2+final_norm" in printed and "after the final layer norm" in printed
    assert "= step200 (identical weights)" in printed
    summary = json.loads(out.read_text())
    assert summary["analysis"]["layers"] == ["layers.0", "layers.1", "layers.2+final_norm"]
    assert summary["steps"] == 1000 and summary["analysis"]["num_rows"] == 64

    assert main([str(hf_revisions), "--output", str(out)]) == 2  # no probe set: an error naming the fix
    assert "--probe-file" in capsys.readouterr().err


def test_missing_transformers_names_the_extra(hf_revisions, probe_rows, tmp_path, monkeypatch) -> None:
    probe = save_rows(tmp_path / "rows.pt", probe_rows, ("input_ids",))
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"capgeo-callbacks\[hf\]"):
        analyze(hf_revisions, probe_file=probe)


def test_library_never_imports_tasks_or_models_and_transformers_only_lazily() -> None:
    # static check: an import test in a subprocess cannot tell, since torchmetrics (under Lightning) imports
    # transformers itself whenever it is installed
    for path in (ROOT / "capgeo_callbacks").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(n.split(".")[0] in ("tasks", "models") for n in names), (path, names)
        top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        for node in top_level:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            assert not any(n.split(".")[0] == "transformers" for n in names), (path, names)


def test_revision_folders_are_ordered_by_their_step(tmp_path) -> None:
    for name in ("checkpoint-1500", "checkpoint-500", "step20-tokens41M"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "config.json").write_text("{}")
    assert [(r.name, r.step) for r in find_revisions(tmp_path / "runs")] == [
        ("step20-tokens41M", 20), ("checkpoint-500", 500), ("checkpoint-1500", 1500)]
    (tmp_path / "pythia-70m").mkdir()
    (tmp_path / "pythia-70m" / "config.json").write_text("{}")
    assert find_revisions(tmp_path / "pythia-70m")[0].step == 0  # one model folder; "70" is not a step
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no .ckpt files"):
        find_revisions(tmp_path / "empty")


def test_helpers() -> None:
    assert resolve_dotted("capgeo_callbacks.detection.layer_order").__name__ == "layer_order"
    assert resolve_dotted("capgeo_callbacks.analyze:main") is main
    with pytest.raises(ValueError, match="has no attribute 'Nope'"):
        resolve_dotted("capgeo_callbacks.Nope")
    with pytest.raises(ValueError, match="cannot import"):
        resolve_dotted("no_such_package_xyz.Thing")
    a = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.zeros(3, dtype=torch.bfloat16)}
    b = {"b": a["b"].clone(), "w": a["w"].clone()}
    assert weights_sha256(a) == weights_sha256(b)  # key order does not matter
    b["w"][1, 2] += 1e-6
    assert weights_sha256(a) != weights_sha256(b)
    assert hf_layer_labels(3, 2) == ["embed", "layers.0", "layers.1+final_norm"]
    assert hf_layer_labels(4, 2) == ["hidden_states.0", "hidden_states.1", "hidden_states.2", "hidden_states.3"]


# -- Lightning checkpoints -----------------------------------------------------------------------------
class SaveAtEveryValidation(Callback):
    """Save ``step=<N>.ckpt`` after each validation (weights only, as validated) and a full ``last.ckpt`` at
    the end."""

    def __init__(self, dirpath: Path) -> None:
        self.dirpath = dirpath

    def on_validation_end(self, trainer: Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            trainer.save_checkpoint(self.dirpath / f"step={trainer.global_step}.ckpt", weights_only=True)

    def on_train_end(self, trainer: Trainer, pl_module: pl.LightningModule) -> None:
        trainer.save_checkpoint(self.dirpath / "last.ckpt")


def test_lightning_checkpoints_give_the_live_series(tmp_path) -> None:
    models, tasks = pytest.importorskip("models"), pytest.importorskip("tasks")
    seed_everything(0, verbose=False)
    dm_kwargs = {"seed": 0, "batch_size": 64, "val_size": 256, "eval_batch_size": 128}
    datamodule = tasks.make_datamodule("add", "easy", **dm_kwargs)
    module = models.CapabilityModule(size="xs", vocab_size=datamodule.vocab_size, max_seq_len=datamodule.seq_len,
                                     warmup_steps=4, max_steps=32)
    layers = ("model.blocks.*", "model.norm_f")
    rankme_cb = RankMeMonitor(layers=layers, selector="answer", num_rows=512)
    probe_cb = LinearProbeMonitor(layers=layers, num_rows=512)
    detector = PrecursorDetector(monitor="val/acc")
    ckpts = tmp_path / "run" / "checkpoints"
    trainer = Trainer(max_steps=32, val_check_interval=8, check_val_every_n_epoch=None, num_sanity_val_steps=0,
                      accelerator="cpu", logger=False, default_root_dir=tmp_path / "run", enable_checkpointing=False,
                      callbacks=[rankme_cb, probe_cb, detector, SaveAtEveryValidation(ckpts)],
                      enable_progress_bar=False, enable_model_summary=False, deterministic=True)
    trainer.fit(module, datamodule=datamodule)

    # the class is recorded in each checkpoint (weights-only ones too); the layers default to capgeo's (the
    # weights-only checkpoints hold no callback state); the probe set is built from the same datamodule arguments
    summary = analyze(ckpts, task="add", difficulty="easy", datamodule_kwargs=dm_kwargs, num_rows=512, probes=True)
    assert [r["step"] for r in summary["revisions"]] == [8, 16, 24, 32]
    assert summary["skipped_revisions"][0]["name"] == "last.ckpt"  # the same step and weights as step=32
    assert summary["analysis"]["layers"] == ["blocks.0", "blocks.1", "norm_f"]
    assert summary["analysis"]["watched"] == ["**.blocks.*", "**.norm_f"]
    assert summary["analysis"]["selector"] == "answer" and summary["duplicate_weights"] == []
    worst = 0.0
    for tag, live_points in rankme_cb.series.items():
        offline = summary["series"][tag]
        assert [p[0] for p in offline] == [p[0] for p in live_points]
        for (_, value), (_, live) in zip(offline, live_points, strict=True):
            assert value == pytest.approx(live, rel=REL), tag
            worst = max(worst, rel_diff(value, live))
    print(f"Lightning offline vs live RankMe: worst relative difference {worst:.1e}")
    for tag, live_points in probe_cb.series.items():
        assert summary["series"][tag] == live_points, tag  # held-out accuracy: a count, exactly equal
    assert [p[0] for p in summary["series"]["acc"]] == [8, 16, 24, 32]
    for (_, value), (_, live) in zip(summary["series"]["acc"], detector.summary["series"]["acc"], strict=True):
        assert value == pytest.approx(live, abs=1e-9)
    live = detector.summary
    assert summary["rankme_rows"] == live["rankme_rows"]
    for key in ("acquisition_step", "verdict", "gap", "layer_order_rho"):
        assert summary[key] == live[key], key
    for name, info in live["layers"].items():
        assert summary["layers"][name]["collapse_step"] == info["collapse_step"]
        assert summary["layers"][name]["verdict"] == info["verdict"]


def test_checkpoint_without_a_recorded_class_asks_for_one(tmp_path) -> None:
    models = pytest.importorskip("models")
    module = models.CapabilityModule(size="xs", vocab_size=20, max_seq_len=8)
    trainer = Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False)
    trainer.strategy.connect(module)
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    checkpoint = torch.load(tmp_path / "a.ckpt", weights_only=True)
    assert checkpoint["capgeo"]["module_class"] == "models.lightning_module.CapabilityModule"
    del checkpoint["capgeo"]
    torch.save(checkpoint, tmp_path / "a.ckpt")
    assert [r.step for r in find_revisions(tmp_path)] == [0]
    with pytest.raises(ValueError, match="--module-class"):
        analyze(tmp_path, task="add", difficulty="easy")


@pytest.mark.slow
def test_train_py_run_analysed_offline(tmp_path) -> None:
    train = pytest.importorskip("train")
    live = train.main(["--task", "mod", "--difficulty", "easy", "--max-steps", "32", "--eval-points", "4",
                       "--measures", "rankme", "--logdir", str(tmp_path), "--no-progress"])
    run_dir = Path(live["run_dir"])
    out = tmp_path / "offline.json"
    # everything else (class, layers, task, difficulty, seed) is read from the checkpoint and its run folder
    assert main([str(run_dir), "--output", str(out), "--quiet"]) == 0
    offline = json.loads(out.read_text())
    assert offline["task"] == "mod" and offline["difficulty"] == "easy"
    assert offline["analysis"]["watched"] == ["model.blocks.*", "model.norm_f"]  # the live monitor's patterns
    [revision] = offline["revisions"]
    assert revision["step"] == 32
    for tag, points in live["series"].items():
        if tag.startswith("rankme/"):
            assert revision["rankme"][tag.removeprefix("rankme/")] == pytest.approx(points[-1][1], rel=REL), tag
    assert revision["acc"] == pytest.approx(live["series"]["acc"][-1][1], abs=1e-9)
