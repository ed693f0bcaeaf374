"""Every answer is right, checked against plain-Python references on the decoded question."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks import PAD_ID, VOCAB, TaskDataModule, decode, make_datamodule
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


def _answer_rows(task: str, difficulty: str, n: int) -> list[tuple[str, ...]]:
    """The whole answers (one token per query) of n training examples."""
    dm = make_datamodule(task, difficulty, batch_size=n)
    answers = dm.train_batch(0)["targets"][:, -dm.answer_len :]
    assert dm.answer_len == dm.params["queries"] >= 2
    return [tuple(VOCAB[i] for i in row) for row in answers.tolist()]


def _check_balanced(rows: list[tuple[str, ...]], labels: set[str], slack: float) -> None:
    """Every query's answer is uniform over ``labels``, and so is the whole answer over all tuples.

    The second part is what makes chance low: no single whole answer (e.g. always ``> > > >``) is
    right much more often than (1/len(labels))**queries of the time.
    """
    n, q = len(rows), len(rows[0])
    for j in range(q):
        counts = Counter(r[j] for r in rows)
        assert set(counts) == labels
        assert all(abs(c / n - 1 / len(labels)) < slack for c in counts.values()), (j, counts)
    whole = Counter(rows)
    chance = len(labels) ** -q
    assert len(whole) == len(labels) ** q
    # The most frequent of the len(labels)**q whole answers: within 5 standard deviations of its
    # expected count n * chance (or 1.5x it), so many-query levels (128 answers at 7 queries) pass.
    expected = n * chance
    assert max(whole.values()) < max(1.5 * expected, expected + 5 * expected**0.5), whole.most_common(3)


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_compare_answers_are_balanced(difficulty: str) -> None:
    _check_balanced(_answer_rows("compare", difficulty, 8000), {">", "<", "="}, 0.04)


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
@pytest.mark.parametrize("task", ["deduce", "parity"])
def test_deduce_and_parity_answers_are_balanced(task: str, difficulty: str) -> None:
    labels = {"0", "1"} if task == "parity" else {">", "<"}
    _check_balanced(_answer_rows(task, difficulty, 8000), labels, 0.04)


def test_compare_has_near_misses() -> None:
    """A third of the pairs are equal and a third of the others differ in exactly one digit."""
    dm = make_datamodule("compare", "hard", batch_size=3000)
    q, d = dm.params["queries"], dm.params["digits"]
    width = 2 * d + 2  # a ? b | (or =)
    pairs = full_sequences(dm.train_batch(0))[:, : q * width].reshape(-1, q, width)
    diff = (pairs[:, :, :d] != pairs[:, :, d + 1 : 2 * d + 1]).sum(dim=2)
    assert 0.30 < (diff == 0).float().mean() < 0.37
    assert 0.30 < (diff == 1).float().mean() < 0.37


def _deduce_queries(text: str) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """The successor of each letter along its chain, and the (left, right, answer) of each query."""
    question, answer = text.split(" = ")
    facts, queries = question.split(" | ")
    nxt = {f.split()[0]: f.split()[2] for f in facts.split(" , ")}
    pairs = [(query.split()[0], query.split()[2]) for query in queries.split(" , ")]
    return nxt, [(a, b, r) for (a, b), r in zip(pairs, answer.split(), strict=True)]


def _chain_distance(nxt: dict[str, str], a: str, b: str) -> int:
    """Steps from a to b (or from b to a) following each letter's successor fact."""
    for start, end in ((a, b), (b, a)):
        steps, cur = 0, start
        while cur != end and cur in nxt:
            cur, steps = nxt[cur], steps + 1
        if cur == end:
            return steps
    raise AssertionError(f"{a} and {b} are not on one chain")


def _deduce_distances(dm: TaskDataModule) -> Counter:
    """How often each chain distance between the two queried letters occurs in one training batch."""
    distances: Counter = Counter()
    for row in full_sequences(dm.train_batch(0)):
        nxt, queries = _deduce_queries(decode(row))
        for a, b, r in queries:
            d = _chain_distance(nxt, a, b)
            hi, lo = (a, b) if r == ">" else (b, a)
            assert _chain_distance(nxt, hi, lo) == d and hi != lo  # the answer agrees with the chain
            distances[d] += 1
    return distances


# A long chain with distractors (the hard level before the calibration), to test hops and pairs on.
LONG_CHAIN = {"chain": 8, "distractors": 6, "queries": 2, "hops": 7}

DEDUCE_HOPS_CASES = [
    ("easy", {}),
    ("medium", {}),
    ("hard", {}),
    ("hard", LONG_CHAIN),
    ("medium", {**LONG_CHAIN, "chain": 5, "hops": 1}),
    ("medium", {**LONG_CHAIN, "chain": 5, "hops": 4}),
    ("hard", {**LONG_CHAIN, "hops": 3}),
    ("hard", {**LONG_CHAIN, "hops": 1, "queries": 9}),  # more queries than the 7 pairs at distance 1
]


@pytest.mark.parametrize(("difficulty", "override"), DEDUCE_HOPS_CASES)
def test_deduce_query_distance_is_at_most_hops(difficulty: str, override: dict) -> None:
    """Every queried pair is 1..hops facts apart, and distance 1 and distance hops both occur."""
    dm = make_datamodule("deduce", difficulty, params=override, batch_size=500)
    hops = dm.params["hops"]
    distances = _deduce_distances(dm)
    assert max(distances) <= hops and min(distances) >= 1, distances
    assert distances[1] > 0 and distances[hops] > 0, distances
    assert set(distances) == set(range(1, hops + 1)), distances


def test_deduce_pairs_are_uniform_within_hops() -> None:
    """A query's pair is uniform over the pairs at distance <= hops: distance d has chain-d of them."""
    dm = make_datamodule("deduce", "hard", params={**LONG_CHAIN, "hops": 3}, batch_size=4000)
    chain, hops = dm.params["chain"], dm.params["hops"]
    distances = _deduce_distances(dm)
    total, n_pairs = sum(distances.values()), sum(chain - d for d in range(1, hops + 1))
    for d in range(1, hops + 1):
        assert abs(distances[d] / total - (chain - d) / n_pairs) < 0.02, distances


def test_deduce_hops_is_validated() -> None:
    for hops in (0, 3, 1.5, True):
        with pytest.raises(ValueError, match=r"hops=.* must be an integer in \[1, 2\]"):
            make_datamodule("deduce", "easy", params={"chain": 3, "hops": hops})
    with pytest.raises(ValueError, match=r"hops=7 must be an integer in \[1, 4\]"):
        make_datamodule("deduce", "hard", params={**LONG_CHAIN, "chain": 5})
    assert make_datamodule("deduce", "medium", params={**LONG_CHAIN, "chain": 5, "hops": 4}).params["hops"] == 4


@pytest.mark.parametrize(("difficulty", "override"), DEDUCE_HOPS_CASES)
def test_deduce_queries_ask_distinct_pairs(difficulty: str, override: dict) -> None:
    """An example's queries ask different pairs while there are enough within hops, else all of them."""
    dm = make_datamodule("deduce", difficulty, params=override, batch_size=300)
    chain, q, hops = dm.params["chain"], dm.params["queries"], dm.params["hops"]
    n_pairs = sum(chain - d for d in range(1, hops + 1))
    for row in full_sequences(dm.train_batch(0)):
        _, queries = _deduce_queries(decode(row))
        distinct = {frozenset((a, b)) for a, b, _ in queries}
        assert len(distinct) == min(q, n_pairs), queries


def test_selective_copy_scatters_its_blanks() -> None:
    """copy hard: each question holds exactly ``blanks`` pad tokens, at places that vary between rows."""
    dm = make_datamodule("copy", "hard", batch_size=64)
    assert dm.params["blanks"] > 0
    questions = dm.train_batch(0)["input_ids"][:, : dm.seq_len - dm.answer_len]
    blanks = questions == PAD_ID
    assert (blanks.sum(dim=1) == dm.params["blanks"]).all()
    assert len({tuple(row) for row in blanks.tolist()}) > 32  # not one fixed layout
