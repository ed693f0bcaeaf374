"""Finding, ordering and hashing revisions."""

from __future__ import annotations

import pytest
import torch

from capgeo_callbacks.offline import find_revisions, weights_sha256
from capgeo_callbacks.offline.revisions import duplicate_groups, load_checkpoint


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
    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_revisions(tmp_path / "nowhere")


def test_checkpoints_are_ordered_by_global_step_and_kinds_are_not_mixed(tmp_path) -> None:
    for name, step in (("b.ckpt", 5), ("a.ckpt", 30), ("last.ckpt", 30)):
        torch.save({"global_step": step, "state_dict": {}}, tmp_path / name)
    assert [(r.name, r.step, r.kind) for r in find_revisions(tmp_path)] == [
        ("b.ckpt", 5, "lightning"), ("a.ckpt", 30, "lightning"), ("last.ckpt", 30, "lightning")]
    torch.save({"state_dict": {}}, tmp_path / "x-step=7.ckpt")  # no global_step: the name's step=N
    assert find_revisions(tmp_path / "x-step=7.ckpt")[0].step == 7
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="one kind at a time"):
        find_revisions([tmp_path / "b.ckpt", tmp_path / "hf"])
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(ValueError, match="not a Lightning .ckpt file"):
        find_revisions(tmp_path / "notes.txt")


class Opaque:
    """An object only full unpickling can rebuild."""


def test_pickled_objects_need_allow_pickle(tmp_path) -> None:
    torch.save({"global_step": 1, "state_dict": {}, "extra": Opaque()}, tmp_path / "a.ckpt")
    with pytest.raises(ValueError, match="--allow-pickle"):
        find_revisions(tmp_path)
    assert isinstance(load_checkpoint(tmp_path / "a.ckpt", allow_pickle=True)["extra"], Opaque)
    assert find_revisions(tmp_path, allow_pickle=True)[0].step == 1


def test_weights_hash_and_duplicate_groups() -> None:
    a = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.zeros(3, dtype=torch.bfloat16)}
    b = {"b": a["b"].clone(), "w": a["w"].clone()}
    assert weights_sha256(a) == weights_sha256(b)  # key order does not matter
    b["w"][1, 2] += 1e-6
    assert weights_sha256(a) != weights_sha256(b)
    entries = [{"name": n, "step": s, "weights_sha256": h} for n, s, h in
               (("r1", 1, "x"), ("r2", 2, "y"), ("r3", 3, "x"), ("r4", 4, "z"), ("r5", 5, "x"))]
    assert duplicate_groups(entries) == [{"weights_sha256": "x", "revisions": ["r1", "r3", "r5"], "steps": [1, 3, 5]}]
