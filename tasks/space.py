"""The size of each level's question space: how many distinct questions its generator can ask.

Splits are by a hash of the question into 100 buckets (10 validation, 10 test, 80 train; see
:mod:`tasks.splits`), so each evaluation split holds about a tenth of the space. Spec §3 asks for at
least 512 distinct questions in each, hence a space of well over 5,120 questions per level
(:data:`MIN_SPACE`).

Counts are exact and count what the generators can draw (every question has a positive
probability), with deduce's questions counted in their canonical form (facts as a set).
"""

from __future__ import annotations

import math
from typing import Any

from tasks.params import resolve_params
from tasks.splits import TEST_BUCKETS, VAL_BUCKETS
from tasks.vocab import LETTERS

MIN_EVAL_QUESTIONS = 512  # spec §3: distinct questions in each of validation and test
# A space of this size puts about 640 questions in each evaluation split (10% of it), five standard
# deviations of the hash's luck (about +-24) above 512; every level's space is at least this.
MIN_SPACE = 6_400


def _deduce_space(p: dict[str, Any]) -> int:
    """Ordered main chain x ordered distractor chain x query pairs (rounds of permutations) x flips."""
    chain, distractors, queries, hops = p["chain"], p["distractors"], p["queries"], p["hops"]
    letters = len(LETTERS)
    main = math.perm(letters, chain)
    other = math.perm(letters - chain, distractors + 1) if distractors else 1
    n_pairs = sum(chain - d for d in range(1, hops + 1))
    full, rest = divmod(queries, n_pairs)
    pair_sequences = math.factorial(n_pairs) ** full * math.perm(n_pairs, rest)
    return main * other * pair_sequences * 2**queries


def question_space(task: str, params: dict[str, Any]) -> int:
    """The number of distinct questions of ``task`` with the (resolved) parameters ``params``."""
    if task in ("copy", "reverse"):
        blanks = params.get("blanks", 0)
        return params["alphabet"] ** params["length"] * math.comb(params["length"] + blanks, blanks)
    if task == "compare":
        return 100 ** (params["digits"] * params["queries"])  # every (a, b) pair can be drawn
    if task == "parity":
        return 2 ** (params["bits"] * params["queries"])
    if task == "add":
        return 100 ** params["digits"]
    if task == "mod":
        return params["p"] ** 2
    if task == "sort":
        return params["alphabet"] ** params["length"]
    if task == "mul":
        return 10 ** (params["digits_a"] + params["digits_b"])
    if task == "deduce":
        return _deduce_space(params)
    raise ValueError(f"unknown task {task!r}")


def level_space(task: str, difficulty: str) -> int:
    """:func:`question_space` of a level of :data:`tasks.TASK_PARAMS`."""
    return question_space(task, resolve_params(task, difficulty))


def eval_split_share(space: int) -> float:
    """The expected number of distinct questions in the validation (or test) buckets of a space."""
    assert VAL_BUCKETS == TEST_BUCKETS
    return space * VAL_BUCKETS / 100


def format_count(n: float) -> str:
    """``12,345`` below ten million, else ``1.2e16``."""
    return f"{n:,.0f}" if n < 10_000_000 else f"{n:.1e}".replace("e+", "e")
