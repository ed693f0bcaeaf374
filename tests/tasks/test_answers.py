"""Every answer is right, checked against plain-Python references on the decoded question."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks import decode, make_datamodule
from tests.tasks._reference import reference_answer
from tests.tasks.helpers import LEVELS, datamodule, full_sequences


def _check_batch(task: str, params: dict, batch: dict[str, torch.Tensor]) -> None:
    """Each row: decoded question -> reference answer == the masked targets."""
    seq = full_sequences(batch)
    for row, targets, mask in zip(seq, batch["targets"], batch["answer_mask"], strict=True):
        text = decode(row)
        question, _, answer = text.partition(" = ")
        expected = reference_answer(task, params, question)
        assert decode(targets[mask]).split() == expected, text
        assert answer.split() == expected, text


@pytest.mark.parametrize(("task", "difficulty"), LEVELS, ids=[f"{t}-{d}" for t, d in LEVELS])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**40), k=st.integers(0, 2**31))
def test_train_answers_match_reference(task: str, difficulty: str, seed: int, k: int) -> None:
    dm = make_datamodule(task, difficulty, seed=seed, batch_size=24)
    _check_batch(task, dm.params, dm.train_batch(k))


def test_eval_answers_match_reference(level: tuple[str, str]) -> None:
    dm = datamodule(*level)
    for split in ("val", "test"):
        batch = dm.eval_batch(split)
        _check_batch(level[0], dm.params, {k: v[:256] for k, v in batch.items()})


def _answers(task: str, difficulty: str, n: int = 3000) -> Counter:
    """Counts of single-token answers over n training examples."""
    dm = make_datamodule(task, difficulty, batch_size=n)
    return Counter(decode(dm.train_batch(0)["targets"][:, -1]).split())


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_compare_answers_are_balanced(difficulty: str) -> None:
    counts = _answers("compare", difficulty)
    assert set(counts) == {">", "<", "="}
    assert all(0.25 < counts[a] / 3000 < 0.42 for a in counts), counts


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_deduce_and_parity_answers_are_balanced(difficulty: str) -> None:
    for task, labels in (("deduce", {">", "<"}), ("parity", {"0", "1"})):
        counts = _answers(task, difficulty)
        assert set(counts) == labels
        assert all(0.45 < counts[a] / 3000 < 0.55 for a in counts), (task, counts)


def test_compare_has_near_misses() -> None:
    """A third of the unequal pairs differ in exactly one digit, so every digit matters."""
    dm = make_datamodule("compare", "hard", batch_size=3000)
    q = dm.train_batch(0)["input_ids"][:, : 2 * 10 + 1]
    diff = (q[:, :10] != q[:, 11:]).sum(dim=1)
    assert 0.28 < (diff == 1).float().mean() < 0.39


def test_deduce_query_gaps_vary() -> None:
    """Queries span adjacent and distant chain positions (not only the ends)."""
    dm = make_datamodule("deduce", "hard", batch_size=500)
    texts = [decode(r) for r in full_sequences(dm.train_batch(0))]
    gaps = Counter()
    for text in texts:
        facts, query = text.split(" | ")
        nxt = {f.split()[0]: f.split()[2] for f in facts.split(" , ")}
        a, _, b = query.split()[:3]
        hi, lo = (a, b) if query.endswith(">") else (b, a)
        steps, cur = 0, hi
        while cur != lo:
            cur, steps = nxt[cur], steps + 1
        gaps[steps] += 1
    assert set(gaps) == set(range(1, 8))
