"""The public contract of ``tasks``: names, vocabulary, batch shapes and masks, errors."""

from __future__ import annotations

import pytest
import torch

import tasks
from tasks import (
    DIFFICULTIES,
    PAD_ID,
    TASK_PARAMS,
    TASKS,
    VOCAB,
    VOCAB_SIZE,
    TaskDataModule,
    decode,
    encode,
    make_datamodule,
)
from tests.tasks.helpers import datamodule, full_sequences


def test_names_and_vocabulary() -> None:
    assert TASKS == ("copy", "reverse", "compare", "parity", "add", "mod", "sort", "mul", "deduce")
    assert DIFFICULTIES == ("easy", "medium", "hard")
    assert set(TASK_PARAMS) == set(TASKS)
    assert all(set(TASK_PARAMS[t]) == set(DIFFICULTIES) for t in TASKS)
    assert PAD_ID == 0 and VOCAB_SIZE == len(VOCAB) < 200
    assert len(set(VOCAB)) == len(VOCAB)
    for sym in ("=", "+", "-", "*", "?", ">", "<", "mod", ",", "|"):
        assert sym in VOCAB
    assert all(str(v) in VOCAB for v in range(128))
    assert all(chr(c) in VOCAB for c in range(ord("a"), ord("z") + 1))
    assert VOCAB.index("1") == VOCAB.index("0") + 1  # digits are consecutive value tokens
    for name in tasks.__all__:
        assert hasattr(tasks, name)


def test_decode_encode_round_trip() -> None:
    text = "3 7 + 4 5 = 0 8 2"
    ids = encode(text)
    assert decode(ids) == text == decode(torch.tensor(ids))
    assert decode([PAD_ID, *ids, PAD_ID]) == text
    assert decode([PAD_ID], skip_pad=False) == VOCAB[0]
    with pytest.raises(ValueError, match="1-D"):
        decode(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="unknown tokens"):
        encode("3 + x7")


def test_batch_shapes_and_masks(level: tuple[str, str]) -> None:
    dm = datamodule(*level)
    assert isinstance(dm, TaskDataModule)
    assert (dm.task, dm.difficulty) == level
    assert dm.params == TASK_PARAMS[level[0]][level[1]]
    assert dm.vocab_size == VOCAB_SIZE
    batches = [dm.train_batch(0), next(iter(dm.val_dataloader())), next(iter(dm.test_dataloader()))]
    for batch in batches:
        assert set(batch) == {"input_ids", "targets", "answer_mask"}
        b = batch["input_ids"].shape[0]
        for key, dtype in (("input_ids", torch.long), ("targets", torch.long), ("answer_mask", torch.bool)):
            assert batch[key].dtype == dtype and batch[key].shape == (b, dm.seq_len), key
        assert torch.equal(batch["input_ids"][:, 1:], batch["targets"][:, :-1])  # one sequence, shifted
        mask = batch["answer_mask"]
        assert (mask.sum(dim=1) == dm.answer_len).all()
        # The answer is the last answer_len targets, right after the "=" that ends the question.
        assert mask[:, -dm.answer_len :].all() and not mask[:, : -dm.answer_len].any()
        eq_pos = dm.seq_len - dm.answer_len  # position of "=" in input_ids
        assert (batch["input_ids"][:, eq_pos] == VOCAB.index("=")).all()
        seq = full_sequences(batch)
        assert ((seq >= 0) & (seq < VOCAB_SIZE)).all()
        if not dm.params.get("blanks"):
            assert not (seq == PAD_ID).any()  # pad tokens appear only as the blanks of selective copying
    assert batches[0]["input_ids"].shape[0] == dm.batch_size


def test_loader_batch_sizes() -> None:
    dm = make_datamodule("add", "medium", batch_size=7, val_size=300, test_size=200, eval_batch_size=128)
    assert next(iter(dm.train_dataloader()))["input_ids"].shape[0] == 7
    assert [b["input_ids"].shape[0] for b in dm.val_dataloader()] == [128, 128, 44]
    assert [b["input_ids"].shape[0] for b in dm.test_dataloader()] == [128, 72]


@pytest.mark.parametrize("bad", ["sorting", "", "Copy", 3])
def test_bad_task_lists_choices(bad: object) -> None:
    with pytest.raises(ValueError) as err:
        make_datamodule(bad, "easy")  # type: ignore[arg-type]
    msg = str(err.value)
    assert repr(bad) in msg and "valid tasks: " + ", ".join(TASKS) in msg


@pytest.mark.parametrize("bad", ["extreme", "Easy", None])
def test_bad_difficulty_lists_choices(bad: object) -> None:
    with pytest.raises(ValueError) as err:
        make_datamodule("sort", bad)  # type: ignore[arg-type]
    msg = str(err.value)
    assert repr(bad) in msg and "valid difficulties: easy, medium, hard" in msg


def test_param_overrides() -> None:
    dm = make_datamodule("sort", "easy", params={"length": 5})
    assert dm.params == {"length": 5, "alphabet": 10} and dm.seq_len == 10
    assert TASK_PARAMS["sort"]["easy"]["length"] == 8  # the table is not modified
    with pytest.raises(ValueError, match="valid parameters: alphabet, length"):
        make_datamodule("sort", "easy", params={"lenght": 5})
    bad_values = [
        ("sort", {"alphabet": 500}),
        ("mod", {"p": 128}),
        ("mod", {"op": "/"}),
        ("add", {"digits": 0}),
        ("mul", {"digits_a": 10, "digits_b": 9}),
        ("deduce", {"chain": 20, "distractors": 6}),
        ("copy", {"length": 2.5}),
        ("parity", {"queries": 0}),
        ("compare", {"queries": -1}),
        ("deduce", {"queries": 1.5}),
        ("deduce", {"queries": True}),
        ("deduce", {"hops": 0}),
        ("deduce", {"hops": 3}),  # easy has chain=3, so at most 2 hops
    ]
    for task, override in bad_values:
        with pytest.raises(ValueError):
            make_datamodule(task, "easy", params=override)


@pytest.mark.parametrize("name", ["batch_size", "val_size", "test_size", "eval_batch_size"])
def test_bad_sizes(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        make_datamodule("copy", "easy", **{name: 0})


def test_mod_ops_are_configurable() -> None:
    for op in ("+", "-", "*"):
        dm = make_datamodule("mod", "hard", params={"op": op})
        assert decode(dm.train_batch(0)["input_ids"][0]).split()[1] == op


def test_multi_query_tasks() -> None:
    """compare, parity and deduce ask ``queries`` questions, one answer token each (2 by default)."""
    for task in ("compare", "parity", "deduce"):
        for d in DIFFICULTIES:
            assert TASK_PARAMS[task][d]["queries"] >= 2  # chance of a whole answer at most 1/4
            assert datamodule(task, d).answer_len == TASK_PARAMS[task][d]["queries"]
        for q in (1, 3):
            dm = make_datamodule(task, "easy", params={"queries": q})
            assert dm.answer_len == q
            text = decode(dm.train_batch(0)["input_ids"][0])
            question = text.split(" = ")[0]
            questions = question.split(" | ")[1].split(" , ") if task == "deduce" else question.split(" | ")
            assert len(questions) == q, text
    # queries=1 gives the single-question layouts, e.g. "0 1 = 1" (parity easy has 2 bits).
    assert make_datamodule("parity", "easy", params={"queries": 1}).seq_len == 3
    assert make_datamodule("compare", "easy", params={"queries": 1}).seq_len == 6
    assert make_datamodule("deduce", "easy", params={"queries": 1}).seq_len == 8  # "a > b | a ? b = >"
