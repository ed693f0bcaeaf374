"""Spec §3: every level's validation and test splits hold at least 512 distinct held-out questions."""

from __future__ import annotations

import pytest
import torch

from tasks import make_datamodule
from tasks.space import MIN_EVAL_QUESTIONS, MIN_SPACE, level_space, question_space
from tasks.splits import TRAIN
from tests.tasks.helpers import LEVELS


@pytest.mark.parametrize(("task", "difficulty"), LEVELS, ids=[f"{t}-{d}" for t, d in LEVELS])
def test_eval_splits_hold_512_distinct_held_out_questions(task: str, difficulty: str) -> None:
    """Built with val_size=test_size=512, both sets are full, distinct, disjoint and never train."""
    dm = make_datamodule(task, difficulty, seed=0, val_size=MIN_EVAL_QUESTIONS, test_size=MIN_EVAL_QUESTIONS)
    keys = {}
    for split in ("val", "test"):
        seqs = dm.eval_sequences(split)
        key = dm.spec.question_key(seqs)
        assert torch.unique(key, dim=0).shape[0] == seqs.shape[0] == MIN_EVAL_QUESTIONS, (split, seqs.shape)
        assert not (dm._split_ids(seqs) == TRAIN).any()  # noqa: SLF001
        assert set(dm.split_of(seqs)) == {split}
        keys[split] = {tuple(row) for row in key.tolist()}
    assert not keys["val"] & keys["test"]
    # ... and no training batch asks any of them.
    train = dm.spec.question_key(torch.cat([dm.train_sequences(k, batch_size=512) for k in range(8)]))
    assert not {tuple(row) for row in train.tolist()} & (keys["val"] | keys["test"])


@pytest.mark.parametrize(("task", "difficulty"), LEVELS, ids=[f"{t}-{d}" for t, d in LEVELS])
def test_question_space_is_large_enough(task: str, difficulty: str) -> None:
    """A tenth of the space (one evaluation split) is well above 512 questions."""
    assert level_space(task, difficulty) >= MIN_SPACE


SMALL_SPACES = [
    ("parity", "easy", {"bits": 3, "queries": 2}),
    ("mod", "easy", {"op": "*", "p": 13}),
    ("mul", "easy", {"digits_a": 2, "digits_b": 1}),
    ("add", "easy", {"digits": 1}),
    ("compare", "easy", {"digits": 1, "queries": 1}),
    ("sort", "easy", {"length": 3, "alphabet": 5}),
    ("copy", "easy", {"length": 2, "alphabet": 3, "blanks": 2}),
    ("reverse", "easy", {"length": 3, "alphabet": 4, "blanks": 0}),
    ("deduce", "easy", {"chain": 2, "distractors": 0, "queries": 2, "hops": 1}),
    ("deduce", "easy", {"chain": 2, "distractors": 0, "queries": 1, "hops": 1}),
]


@pytest.mark.parametrize(("task", "difficulty", "params"), SMALL_SPACES)
def test_question_space_matches_enumeration(task: str, difficulty: str, params: dict) -> None:
    """In small spaces, a large sample visits exactly question_space(...) distinct questions."""
    dm = make_datamodule(task, difficulty, params=params)
    space = question_space(task, dm.params)
    assert space <= 40_000
    seqs = dm.spec.sample(40 * space, torch.Generator().manual_seed(0))
    assert torch.unique(dm.spec.question_key(seqs), dim=0).shape[0] == space

