"""Task names, difficulty levels and each level's parameters.

``TASK_PARAMS`` is the single place a level is defined: change a number here and the task, its
sequence length and the README table all follow. The starting values are the lead's first guess;
they are re-tuned by measurement (``hard`` must not be acquired by the smallest model in
the first tenth of its budget, ``easy`` is acquired quickly).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

TASKS: tuple[str, ...] = ("copy", "reverse", "compare", "parity", "add", "mod", "sort", "mul", "deduce")
DIFFICULTIES: tuple[str, ...] = ("easy", "medium", "hard")

TASK_PARAMS: dict[str, dict[str, dict[str, Any]]] = {
    "copy": {
        "easy": {"length": 6, "alphabet": 10, "blanks": 0},
        "medium": {"length": 16, "alphabet": 10, "blanks": 0},
        "hard": {"length": 12, "alphabet": 32, "blanks": 12},
    },
    "reverse": {
        "easy": {"length": 6, "alphabet": 10, "blanks": 0},
        "medium": {"length": 12, "alphabet": 10, "blanks": 0},
        "hard": {"length": 16, "alphabet": 10, "blanks": 0},
    },
    "compare": {
        "easy": {"digits": 2, "queries": 2},
        "medium": {"digits": 3, "queries": 2},
        "hard": {"digits": 4, "queries": 2},
    },
    "parity": {
        "easy": {"bits": 2, "queries": 7},
        "medium": {"bits": 3, "queries": 5},
        "hard": {"bits": 12, "queries": 2},
    },
    "add": {
        "easy": {"digits": 2},
        "medium": {"digits": 4},
        "hard": {"digits": 8},
    },
    "mod": {
        "easy": {"op": "+", "p": 89},
        "medium": {"op": "+", "p": 113},
        "hard": {"op": "*", "p": 97},
    },
    "sort": {
        "easy": {"length": 8, "alphabet": 10},
        "medium": {"length": 12, "alphabet": 32},
        "hard": {"length": 16, "alphabet": 32},
    },
    "mul": {
        "easy": {"digits_a": 3, "digits_b": 1},
        "medium": {"digits_a": 5, "digits_b": 1},
        "hard": {"digits_a": 8, "digits_b": 1},
    },
    "deduce": {
        "easy": {"chain": 2, "distractors": 0, "queries": 4, "hops": 1},
        "medium": {"chain": 2, "distractors": 1, "queries": 4, "hops": 1},
        "hard": {"chain": 3, "distractors": 0, "queries": 4, "hops": 2},
    },
}

# Tasks whose answer to one question is a single binary / ternary token ask ``queries`` independent
# questions per example and answer each with one token, so that a model at chance gets a whole answer
# right with probability (1/2)**queries or (1/3)**queries, far below the 0.5 acquisition threshold.
_QUERIES_DOC = "independent {what}; the answer is one token per question"

_BLANKS_DOC = "pad tokens scattered at random among the list in the question (selective copying)"

# What each parameter means, for the README table and for error messages.
PARAM_DOCS: dict[str, dict[str, str]] = {
    "copy": {"length": "list length", "alphabet": "values 0..alphabet-1", "blanks": _BLANKS_DOC},
    "reverse": {"length": "list length", "alphabet": "values 0..alphabet-1", "blanks": _BLANKS_DOC},
    "compare": {
        "digits": "digits per number (leading zeros allowed)",
        "queries": _QUERIES_DOC.format(what="number pairs, separated by `|`"),
    },
    "parity": {
        "bits": "bit-string length",
        "queries": _QUERIES_DOC.format(what="bit strings, separated by `|`"),
    },
    "add": {"digits": "digits per operand; answer has digits+1"},
    "mod": {"op": "one of + - *", "p": "modulus, 2..127; residues are single tokens"},
    "sort": {"length": "list length", "alphabet": "values 0..alphabet-1"},
    "mul": {"digits_a": "digits of the first factor", "digits_b": "digits of the second factor"},
    "deduce": {
        "chain": "entities on the queried chain (chain-1 facts)",
        "distractors": "facts of a second, unrelated chain",
        "queries": _QUERIES_DOC.format(what="queries on the main chain, separated by `,`"),
        "hops": "largest chain distance of a queried pair, 1..chain-1 (1: a stated fact, maybe reversed; "
        "d: d-1 transitive steps); each query is uniform over the pairs within that distance",
    },
}


def check_choice(kind: str, value: object, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise a ValueError that lists them."""
    if not isinstance(value, str) or value not in choices:
        plural = "difficulties" if kind == "difficulty" else f"{kind}s"
        raise ValueError(f"unknown {kind} {value!r}; valid {plural}: {', '.join(choices)}")
    return value


def resolve_params(task: str, difficulty: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A copy of the level's parameters, with ``overrides`` applied (unknown keys raise)."""
    check_choice("task", task, TASKS)
    check_choice("difficulty", difficulty, DIFFICULTIES)
    params = copy.deepcopy(TASK_PARAMS[task][difficulty])
    if overrides:
        bad = sorted(set(overrides) - set(params))
        if bad:
            raise ValueError(
                f"unknown parameters {bad} for task {task!r}; valid parameters: {', '.join(sorted(params))}"
            )
        params.update(overrides)
    return params
