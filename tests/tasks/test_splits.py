"""Train, validation and test never share a question; small example spaces are handled exactly."""

from __future__ import annotations

import itertools

import pytest
import torch

from tasks import TaskDataModule, encode, make_datamodule
from tasks.splits import QuestionHasher, unique_rows_in_order
from tasks.vocab import BAR_ID
from tests.tasks.helpers import datamodule


def _problem(task: str, question: list[int]) -> tuple:
    """An example's identity: its question tokens; for deduce, its set of facts plus the queries."""
    if task != "deduce":
        return tuple(question)
    end = question.index(BAR_ID) + 1  # the facts "x > y ," end with "|"
    facts = frozenset((question[i], question[i + 2]) for i in range(0, end, 4))
    return (facts, tuple(question[end:]))


def _questions(dm: TaskDataModule, seqs: torch.Tensor) -> set[tuple]:
    """The problems of full sequences, as a set."""
    return {_problem(dm.task, r) for r in seqs[:, : dm.question_len].tolist()}


def test_val_test_disjoint_and_unique(level: tuple[str, str]) -> None:
    dm = datamodule(*level)
    val, test = dm.eval_sequences("val"), dm.eval_sequences("test")
    qv, qt = _questions(dm, val), _questions(dm, test)
    assert len(qv) == len(val) and len(qt) == len(test)  # no duplicates within a set
    assert not qv & qt
    assert 0 < len(val) <= dm.val_size and 0 < len(test) <= dm.test_size
    assert set(dm.split_of(val[:, : dm.question_len])) == {"val"}
    assert set(dm.split_of(test[:, : dm.question_len])) == {"test"}


def test_no_eval_question_in_training(level: tuple[str, str]) -> None:
    dm = datamodule(*level)
    held_out = _questions(dm, dm.eval_sequences("val")) | _questions(dm, dm.eval_sequences("test"))
    for k in range(0, 400, 20):
        train = _questions(dm, dm.train_sequences(k))
        assert not train & held_out, f"batch {k}"


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_mod_small_space_is_partitioned_exactly(difficulty: str) -> None:
    """Every one of the p*p questions is in exactly one split; eval sets hold all of their bucket."""
    dm = make_datamodule("mod", difficulty)
    p, op = dm.params["p"], dm.params["op"]
    space = torch.tensor([encode(f"{a} {op} {b} mod {p}") for a in range(p) for b in range(p)])
    splits = dm.split_of(space)
    every = {tuple(r) for r in space.tolist()}
    val, test = _questions(dm, dm.eval_sequences("val")), _questions(dm, dm.eval_sequences("test"))
    assert val == {tuple(r) for r, s in zip(space.tolist(), splits, strict=True) if s == "val"}
    assert test == {tuple(r) for r, s in zip(space.tolist(), splits, strict=True) if s == "test"}
    train = set().union(*(_questions(dm, dm.train_sequences(k, batch_size=4096)) for k in range(20)))
    if difficulty == "easy":
        assert train == every - val - test  # 20 batches of 4096 visit all ~6,300 train questions (p=89)
    assert not train & (val | test)


def test_small_multi_query_space_eval_sets_hold_their_whole_bucket() -> None:
    """Parity with 2 strings of 4 bits has 256 questions; each eval set holds all of its bucket."""
    dm = make_datamodule("parity", "easy", params={"bits": 4, "queries": 2})
    assert (dm.question_len, dm.answer_len) == (9, 2)
    strings = [" ".join(bits) for bits in itertools.product("01", repeat=4)]
    space = torch.tensor([encode(f"{x} | {y}") for x in strings for y in strings])
    splits = dm.split_of(space)
    every = {tuple(r) for r in space.tolist()}
    held_out = set()
    for name in ("val", "test"):
        got = _questions(dm, dm.eval_sequences(name))
        assert got == {tuple(r) for r, s in zip(space.tolist(), splits, strict=True) if s == name}
        held_out |= got
    train = set().union(*(_questions(dm, dm.train_sequences(k)) for k in range(40)))
    assert train == every - held_out


def test_deduce_fact_order_does_not_change_the_split() -> None:
    dm = datamodule("deduce", "hard")
    n_facts = dm.params["chain"] - 1 + dm.params["distractors"]
    assert n_facts >= 2  # else there is no order to shuffle
    for name in ("val", "test"):
        seqs = dm.eval_sequences(name)[:200]
        facts = seqs[:, : 4 * n_facts].reshape(-1, n_facts, 4)
        perm = torch.randperm(n_facts, generator=torch.Generator().manual_seed(1))
        shuffled = seqs.clone()
        shuffled[:, : 4 * n_facts - 1] = facts[:, perm].reshape(-1, 4 * n_facts)[:, :-1]  # keep the final "|"
        assert not torch.equal(shuffled, seqs)
        assert set(dm.split_of(shuffled)) == {name}


def test_eval_size_is_respected_and_a_prefix() -> None:
    small = make_datamodule("sort", "medium", val_size=100, test_size=50)
    big = datamodule("sort", "medium")
    assert len(small.eval_sequences("val")) == 100 and len(small.eval_sequences("test")) == 50
    assert len(big.eval_sequences("val")) == 2048
    assert torch.equal(small.eval_sequences("val"), big.eval_sequences("val")[:100])


def test_bucket_fractions() -> None:
    hasher = QuestionHasher("copy", 16)
    q = torch.randint(11, 21, (50_000, 16), generator=torch.Generator().manual_seed(0))
    s = hasher.split(q)
    for split, frac in ((0, 0.8), (1, 0.1), (2, 0.1)):
        assert abs((s == split).float().mean().item() - frac) < 0.01
    # Questions differing in one token land in unrelated buckets.
    q2 = q.clone()
    q2[:, 5] = torch.where(q2[:, 5] == 11, 12, 11)
    assert (hasher.buckets(q) == hasher.buckets(q2)).float().mean() < 0.03


def test_split_does_not_depend_on_seed() -> None:
    a, b = make_datamodule("add", "easy", seed=0), make_datamodule("add", "easy", seed=1)
    held_a = _questions(a, a.eval_sequences("val")) | _questions(a, a.eval_sequences("test"))
    assert not _questions(b, b.train_sequences(0, batch_size=4000)) & held_a


def test_unique_rows_in_order() -> None:
    x = torch.tensor([[3, 1], [1, 2], [3, 1], [0, 0], [1, 2]])
    assert unique_rows_in_order(x).tolist() == [[3, 1], [1, 2], [0, 0]]
    assert unique_rows_in_order(x[:0]).shape == (0, 2)
