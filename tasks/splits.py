"""Disjoint train / validation / test splits by hashing each example's question.

Every question (the tokens before ``=``) is hashed to a bucket in 0..99 by additive tabulation
hashing (a fixed random table per position and token, summed mod 2**31, then an integer mixer):
buckets 0-9 are validation, 10-19 test, 20-99 train. The table depends only on the task name, not on
the run seed, so no question of any run's validation or test set is ever trained on, for any seed.
Since the answer is a function of the question, disjoint questions mean disjoint examples. A task
may hash a canonical form of its question instead (deduce sorts its facts), so that mere
re-orderings of one problem cannot straddle two splits.
"""

from __future__ import annotations

import math
import zlib

import torch
from torch import Tensor

from tasks.vocab import VOCAB_SIZE

TRAIN, VAL, TEST = 0, 1, 2
SPLIT_NAMES: dict[int, str] = {TRAIN: "train", VAL: "val", TEST: "test"}
VAL_BUCKETS = 10  # buckets [0, 10) of 100
TEST_BUCKETS = 10  # buckets [10, 20) of 100
TRAIN_FRACTION = 1.0 - (VAL_BUCKETS + TEST_BUCKETS) / 100

_MASK31 = (1 << 31) - 1
_MASK63 = (1 << 63) - 1
_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    """One step of the splitmix64 mixer (on Python ints, exact)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers (run seed, stream, index), well mixed so nearby seeds differ."""
    h = 0
    for p in parts:
        h = _splitmix64(h ^ (int(p) & _MASK64))
    return h & _MASK63


def seeded_generator(*parts: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with :func:`derive_seed` of ``parts``."""
    return torch.Generator().manual_seed(derive_seed(*parts))


class QuestionHasher:
    """Maps question rows [n, Q] of token ids to split ids (TRAIN, VAL, TEST), vectorised."""

    def __init__(self, task: str, question_len: int) -> None:
        g = torch.Generator().manual_seed(zlib.crc32(task.encode()))
        self.question_len = question_len
        self._table = torch.randint(0, 1 << 31, (question_len * VOCAB_SIZE,), generator=g)
        self._offsets = torch.arange(question_len) * VOCAB_SIZE

    def buckets(self, questions: Tensor) -> Tensor:
        """[n, Q] token ids -> [n] buckets in 0..99."""
        h = self._table[questions + self._offsets].sum(dim=1) & _MASK31
        for _ in range(2):  # 31-bit multiply-xorshift mixer; products stay below 2**58
            h = ((h ^ (h >> 16)) * 0x45D9F3B) & _MASK31
        return (h ^ (h >> 16)) % 100

    def split(self, questions: Tensor) -> Tensor:
        """[n, Q] token ids -> [n] split ids."""
        b = self.buckets(questions)
        return torch.where(b < VAL_BUCKETS, VAL, torch.where(b < VAL_BUCKETS + TEST_BUCKETS, TEST, TRAIN))


def first_occurrences(keys: Tensor) -> Tensor:
    """Indices of the first occurrence of each distinct row of ``keys``, in increasing order."""
    if keys.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long)
    _, inverse = torch.unique(keys, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), keys.shape[0], dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(keys.shape[0]), reduce="amin")
    return first.sort().values


def unique_rows_in_order(x: Tensor) -> Tensor:
    """The distinct rows of ``x`` in order of first appearance."""
    return x[first_occurrences(x)]


def oversample_count(needed: int, fraction: float) -> int:
    """Candidates to draw so that, kept with probability ``fraction``, ``needed`` survive almost always."""
    mean = needed / fraction
    return math.ceil(mean + 4.0 * math.sqrt(mean) + 8)
