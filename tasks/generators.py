"""Vectorised generators: one function per task, drawing a whole batch of sequences at once.

Every generator returns full token sequences ``seq`` of shape ``[n, question_len + 1 + answer_len]``
laid out as ``question tokens, "=", answer tokens``. Within one level every sequence has the same
length and every answer the same number of tokens (numbers are zero-padded), so no padding is
ever needed. Randomness comes only from the ``torch.Generator`` passed in, so a seeded generator
reproduces the batch exactly. There is no per-example Python loop: every step is a tensor op over
the batch (Python loops run only over a level's constant sizes when building a spec).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from tasks.params import PARAM_DOCS
from tasks.vocab import (
    BAR_ID,
    COMMA_ID,
    EQ_ID,
    GT_ID,
    LETTERS,
    LT_ID,
    MINUS_ID,
    MOD_ID,
    NUM_VALUES,
    PAD_ID,
    PLUS_ID,
    QUERY_ID,
    TIMES_ID,
    VALUE0_ID,
    letters_to_ids,
    values_to_ids,
)

Sampler = Callable[[int, torch.Generator], Tensor]

MAX_INT_DIGITS = 18  # 10**18 < 2**63: products and sums stay exact in int64
MAX_QUERIES = 64  # questions per example of compare, parity and deduce


@dataclass(frozen=True)
class TaskSpec:
    """A task at one level: its parameters, its fixed lengths and its batch sampler."""

    task: str
    params: dict[str, Any]
    question_len: int  # tokens before "="
    answer_len: int  # tokens after "="
    sample: Sampler  # (n, generator) -> seq [n, question_len + 1 + answer_len]
    # Question rows -> a canonical form of the same shape, hashed for the split and deduplicated
    # in evaluation sets; None means the question itself.
    canonical: Callable[[Tensor], Tensor] | None = None

    @property
    def seq_len(self) -> int:
        """Length T of ``input_ids`` (the full sequence minus one)."""
        return self.question_len + self.answer_len

    def question_key(self, seq: Tensor) -> Tensor:
        """The rows that identify each example of full (or question-only) sequences ``seq``."""
        q = seq[:, : self.question_len]
        return q if self.canonical is None else self.canonical(q)


def _col(n: int, token_id: int) -> Tensor:
    """A [n, 1] column filled with one token id."""
    return torch.full((n, 1), token_id, dtype=torch.long)


def _pow10(digits: int) -> Tensor:
    """[10**(digits-1), ..., 10, 1]: weights of most-significant-first digits."""
    return 10 ** torch.arange(digits - 1, -1, -1, dtype=torch.long)


def _digits_to_int(d: Tensor) -> Tensor:
    """[n, D] most-significant-first digits -> [n] int64 values."""
    return d @ _pow10(d.shape[1])


def _int_to_digits(v: Tensor, digits: int) -> Tensor:
    """[n] non-negative int64 values -> [n, digits] most-significant-first, zero-padded."""
    return (v.unsqueeze(1) // _pow10(digits)) % 10


def _int_param(task: str, params: dict[str, Any], name: str, lo: int, hi: int) -> int:
    """Read an integer parameter and check lo <= value <= hi."""
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(
            f"{task} parameter {name}={value!r} must be an integer in [{lo}, {hi}] ({PARAM_DOCS[task][name]})"
        )
    return value


def _copy_like(task: str, params: dict[str, Any], reverse: bool) -> TaskSpec:
    """``x_1 .. x_L = x_1 .. x_L`` (copy) or ``= x_L .. x_1`` (reverse).

    With ``blanks > 0`` the list is spread over ``length + blanks`` slots, the other slots holding
    blank (pad) tokens at random places, and the answer is the list alone (selective copying). The
    source of answer token j is then no fixed distance back, so the model must count the list tokens
    before it, instead of using the fixed relative offset that rotary positions make trivial.
    """
    length = _int_param(task, params, "length", 1, 1024)
    alphabet = _int_param(task, params, "alphabet", 2, NUM_VALUES)
    blanks = _int_param(task, params, "blanks", 0, 1024) if "blanks" in params else 0
    slots = length + blanks

    def sample(n: int, g: torch.Generator) -> Tensor:
        x = values_to_ids(torch.randint(0, alphabet, (n, length), generator=g))
        y = x.flip(1) if reverse else x
        if blanks:
            places = _random_perm(n, slots, g)[:, :length].sort(dim=1).values  # list slots, in order
            x = torch.full((n, slots), PAD_ID, dtype=torch.long).scatter(1, places, x)
        return torch.cat([x, _col(n, EQ_ID), y], dim=1)

    return TaskSpec(task, params, slots, length, sample)


def _queries(task: str, params: dict[str, Any]) -> int:
    """The number of independent questions per example (one answer token each)."""
    return _int_param(task, params, "queries", 1, MAX_QUERIES)


def _separators(n: int, queries: int, sep_id: int) -> Tensor:
    """[n, queries, 1]: ``sep_id`` after each question but the last, which is followed by ``=``."""
    sep = torch.full((queries, 1), sep_id, dtype=torch.long)
    sep[-1] = EQ_ID
    return sep.expand(n, queries, 1)


def _compare(params: dict[str, Any]) -> TaskSpec:
    """``a ? b | a' ? b' | ... = r r' ..`` with each r in ``> < =``.

    Each of the ``queries`` pairs is drawn independently: a third are equal, a third differ in one
    digit (so every digit matters), a third are two independent numbers.
    """
    digits = _int_param("compare", params, "digits", 1, 256)
    queries = _queries("compare", params)

    def sample(n: int, g: torch.Generator) -> Tensor:
        a = torch.randint(0, 10, (n, queries, digits), generator=g)
        mode = torch.randint(0, 3, (n, queries, 1), generator=g)  # 0 equal, 1 one digit off, 2 independent
        pos = torch.randint(0, digits, (n, queries, 1), generator=g)
        delta = torch.randint(1, 10, (n, queries, 1), generator=g)
        near = a.scatter(2, pos, (a.gather(2, pos) + delta) % 10)
        other = torch.randint(0, 10, (n, queries, digits), generator=g)
        b = torch.where(mode == 0, a, torch.where(mode == 1, near, other))
        diff = a - b
        first = (diff != 0).long().argmax(dim=2, keepdim=True)  # first differing digit (0 if none)
        sign = diff.gather(2, first).squeeze(2)
        ans = torch.where(sign > 0, GT_ID, torch.where(sign < 0, LT_ID, EQ_ID))
        query = torch.full((n, queries, 1), QUERY_ID, dtype=torch.long)
        pairs = torch.cat([values_to_ids(a), query, values_to_ids(b), _separators(n, queries, BAR_ID)], dim=2)
        return torch.cat([pairs.reshape(n, queries * (2 * digits + 2)), ans], dim=1)

    return TaskSpec("compare", params, queries * (2 * digits + 2) - 1, queries, sample)


def _parity(params: dict[str, Any]) -> TaskSpec:
    """``b_1 .. b_N | b'_1 .. b'_N | ... = p p' ..`` with p = (sum b) mod 2, one per bit string."""
    bits = _int_param("parity", params, "bits", 1, 1024)
    queries = _queries("parity", params)

    def sample(n: int, g: torch.Generator) -> Tensor:
        x = torch.randint(0, 2, (n, queries, bits), generator=g)
        ans = x.sum(dim=2) % 2
        strings = torch.cat([values_to_ids(x), _separators(n, queries, BAR_ID)], dim=2)
        return torch.cat([strings.reshape(n, queries * (bits + 1)), values_to_ids(ans)], dim=1)

    return TaskSpec("parity", params, queries * (bits + 1) - 1, queries, sample)


def _add(params: dict[str, Any]) -> TaskSpec:
    """``a + b = s`` with D-digit operands and a (D+1)-digit zero-padded sum."""
    digits = _int_param("add", params, "digits", 1, MAX_INT_DIGITS - 1)

    def sample(n: int, g: torch.Generator) -> Tensor:
        a = torch.randint(0, 10, (n, digits), generator=g)
        b = torch.randint(0, 10, (n, digits), generator=g)
        s = _int_to_digits(_digits_to_int(a) + _digits_to_int(b), digits + 1)
        return torch.cat(
            [values_to_ids(a), _col(n, PLUS_ID), values_to_ids(b), _col(n, EQ_ID), values_to_ids(s)], dim=1
        )

    return TaskSpec("add", params, 2 * digits + 1, digits + 1, sample)


_MOD_OPS: dict[str, tuple[int, Callable[[Tensor, Tensor], Tensor]]] = {
    "+": (PLUS_ID, torch.add),
    "-": (MINUS_ID, torch.sub),
    "*": (TIMES_ID, torch.mul),
}


def _mod(params: dict[str, Any]) -> TaskSpec:
    """``a op b mod p = c`` with a, b, c single residue tokens in 0..p-1."""
    p = _int_param("mod", params, "p", 2, NUM_VALUES - 1)  # p itself is written as a value token
    op = params["op"]
    if op not in _MOD_OPS:
        raise ValueError(f"mod parameter op={op!r} must be one of {', '.join(_MOD_OPS)}")
    op_id, fn = _MOD_OPS[op]
    p_id = VALUE0_ID + p

    def sample(n: int, g: torch.Generator) -> Tensor:
        a = torch.randint(0, p, (n, 1), generator=g)
        b = torch.randint(0, p, (n, 1), generator=g)
        c = torch.remainder(fn(a, b), p)  # remainder: non-negative for p > 0, also for "-"
        return torch.cat(
            [
                values_to_ids(a),
                _col(n, op_id),
                values_to_ids(b),
                _col(n, MOD_ID),
                _col(n, p_id),
                _col(n, EQ_ID),
                values_to_ids(c),
            ],
            dim=1,
        )

    return TaskSpec("mod", params, 5, 1, sample)


def _sort(params: dict[str, Any]) -> TaskSpec:
    """``x_1 .. x_L = sorted(x)`` (ascending, duplicates kept)."""
    length = _int_param("sort", params, "length", 1, 1024)
    alphabet = _int_param("sort", params, "alphabet", 2, NUM_VALUES)

    def sample(n: int, g: torch.Generator) -> Tensor:
        x = torch.randint(0, alphabet, (n, length), generator=g)
        return torch.cat([values_to_ids(x), _col(n, EQ_ID), values_to_ids(x.sort(dim=1).values)], dim=1)

    return TaskSpec("sort", params, length, length, sample)


def _mul(params: dict[str, Any]) -> TaskSpec:
    """``a * b = c`` with an n-digit a, an m-digit b and an (n+m)-digit zero-padded product."""
    da = _int_param("mul", params, "digits_a", 1, MAX_INT_DIGITS - 1)
    db = _int_param("mul", params, "digits_b", 1, MAX_INT_DIGITS - 1)
    if da + db > MAX_INT_DIGITS:
        raise ValueError(f"mul needs digits_a + digits_b <= {MAX_INT_DIGITS}, got {da} + {db}")

    def sample(n: int, g: torch.Generator) -> Tensor:
        a = torch.randint(0, 10, (n, da), generator=g)
        b = torch.randint(0, 10, (n, db), generator=g)
        c = _int_to_digits(_digits_to_int(a) * _digits_to_int(b), da + db)
        return torch.cat(
            [values_to_ids(a), _col(n, TIMES_ID), values_to_ids(b), _col(n, EQ_ID), values_to_ids(c)], dim=1
        )

    return TaskSpec("mul", params, da + db + 1, da + db, sample)


def _random_perm(n: int, k: int, g: torch.Generator) -> Tensor:
    """[n, k] rows, each a uniformly random permutation of 0..k-1."""
    return torch.rand(n, k, generator=g).argsort(dim=1, stable=True)


def _deduce(params: dict[str, Any]) -> TaskSpec:
    """Shuffled facts ``x > y ,`` of a chain (plus a distractor chain), then ``| x ? y , ... = r ..``.

    The main chain has ``chain`` distinct letters e_1 > e_2 > ... > e_C (C-1 facts); the distractor
    chain, on other letters, gives ``distractors`` more facts. Each of the ``queries`` queries names
    two distinct letters e_i, e_j of the main chain at distance 1 <= |i - j| <= ``hops`` in random
    order, so its answer (``>`` or ``<``) follows by |i - j| - 1 transitive steps (``hops=1`` asks
    only stated facts, possibly reversed). The pair is uniform over all such unordered pairs; pairs
    are distinct while there are enough of them (they are drawn without replacement, in rounds
    through all pairs when there are fewer pairs than queries) and every order is a fair coin, so the
    answers are independent and each is 50/50.
    """
    chain = _int_param("deduce", params, "chain", 2, len(LETTERS))
    distractors = _int_param("deduce", params, "distractors", 0, len(LETTERS))
    queries = _queries("deduce", params)
    hops = _int_param("deduce", params, "hops", 1, chain - 1)
    n_entities = chain + (distractors + 1 if distractors else 0)
    if n_entities > len(LETTERS):
        raise ValueError(
            f"deduce needs chain + distractors + 1 <= {len(LETTERS)} letters, got chain={chain}, "
            f"distractors={distractors}"
        )
    n_facts = chain - 1 + distractors
    sep = torch.full((n_facts,), COMMA_ID, dtype=torch.long)
    sep[-1] = BAR_ID
    hi_pos, lo_pos = torch.triu_indices(chain, chain, offset=1)  # all chain position pairs i < j
    near = lo_pos - hi_pos <= hops  # ... at distance at most hops
    hi_pos, lo_pos = hi_pos[near], lo_pos[near]
    n_pairs = hi_pos.shape[0]
    rounds = -(-queries // n_pairs)

    def sample(n: int, g: torch.Generator) -> Tensor:
        ent = letters_to_ids(_random_perm(n, len(LETTERS), g)[:, :n_entities])
        main, other = ent[:, :chain], ent[:, chain:]
        heads = torch.cat([main[:, :-1], other[:, :-1]], dim=1)  # fact i: heads[i] > tails[i]
        tails = torch.cat([main[:, 1:], other[:, 1:]], dim=1)
        order = _random_perm(n, n_facts, g)
        heads, tails = heads.gather(1, order), tails.gather(1, order)
        facts = torch.stack(
            [heads, torch.full_like(heads, GT_ID), tails, sep.expand(n, n_facts)], dim=2
        ).reshape(n, 4 * n_facts)
        pair = torch.cat([_random_perm(n, n_pairs, g) for _ in range(rounds)], dim=1)[:, :queries]
        hi, lo = hi_pos[pair], lo_pos[pair]  # chain positions, hi earlier (greater) than lo
        flip = torch.randint(0, 2, (n, queries), generator=g, dtype=torch.bool)
        left, right = torch.where(flip, lo, hi), torch.where(flip, hi, lo)
        ans = torch.where(flip, LT_ID, GT_ID)  # left ? right is ">" iff left is earlier in the chain
        query = torch.stack(
            [main.gather(1, left), torch.full_like(left, QUERY_ID), main.gather(1, right)], dim=2
        )
        query = torch.cat([query, _separators(n, queries, COMMA_ID)], dim=2).reshape(n, 4 * queries)
        return torch.cat([facts, query, ans], dim=1)

    def canonical(questions: Tensor) -> Tensor:
        """The same question with its facts sorted, so every fact order gives one key."""
        n = questions.shape[0]
        facts = questions[:, : 4 * n_facts].reshape(n, n_facts, 4)
        order = (facts[:, :, 0] * 256 + facts[:, :, 2]).argsort(dim=1)  # by (head, tail)
        facts = facts.gather(1, order.unsqueeze(2).expand(n, n_facts, 4)).clone()
        facts[:, :, 3] = sep
        return torch.cat([facts.reshape(n, 4 * n_facts), questions[:, 4 * n_facts :]], dim=1)

    return TaskSpec("deduce", params, 4 * n_facts + 4 * queries - 1, queries, sample, canonical)


_BUILDERS: dict[str, Callable[[dict[str, Any]], TaskSpec]] = {
    "copy": lambda p: _copy_like("copy", p, reverse=False),
    "reverse": lambda p: _copy_like("reverse", p, reverse=True),
    "compare": _compare,
    "parity": _parity,
    "add": _add,
    "mod": _mod,
    "sort": _sort,
    "mul": _mul,
    "deduce": _deduce,
}


def build_spec(task: str, params: dict[str, Any]) -> TaskSpec:
    """The :class:`TaskSpec` of ``task`` with the given (already resolved) parameters."""
    return _BUILDERS[task](dict(params))
