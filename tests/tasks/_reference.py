"""Plain-Python reference answers, computed from a decoded question string.

Independent of the generators on purpose: it parses the text a person would read and answers it
with ``int`` arithmetic, ``sorted`` and a graph walk, so a bug in the vectorised code cannot hide
behind the same bug here.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any


def _number(tokens: list[str]) -> int:
    """Most-significant-first digit tokens -> int, checking each is a single digit."""
    assert tokens and all(t in "0123456789" and len(t) == 1 for t in tokens), tokens
    return int("".join(tokens))


def _digits(value: int, width: int) -> list[str]:
    """Zero-padded decimal digits of ``value``."""
    text = str(value).zfill(width)
    assert len(text) == width, (value, width)
    return list(text)


def _values(tokens: list[str], alphabet: int) -> list[int]:
    """Value tokens -> ints, checking they lie in the alphabet."""
    vals = [int(t) for t in tokens]
    assert all(0 <= v < alphabet for v in vals), (tokens, alphabet)
    return vals


def _reaches(edges: dict[str, set[str]], src: str, dst: str) -> bool:
    """Whether ``dst`` is reachable from ``src`` along ``edges`` (iterative DFS)."""
    stack, seen = [src], {src}
    while stack:
        node = stack.pop()
        if node == dst:
            return True
        for nxt in edges[node] - seen:
            seen.add(nxt)
            stack.append(nxt)
    return False


def _distance(undirected: dict[str, set[str]], src: str, dst: str) -> int:
    """The number of facts on a shortest path between ``src`` and ``dst``, ignoring direction (BFS)."""
    frontier, seen, steps = {src}, {src}, 0
    while dst not in frontier:
        assert frontier, (src, dst)
        frontier = {nxt for node in frontier for nxt in undirected[node]} - seen
        seen |= frontier
        steps += 1
    return steps


def _components(undirected: dict[str, set[str]]) -> list[set[str]]:
    """Connected components of an undirected graph."""
    comps, seen = [], set()
    for node in list(undirected):
        if node in seen:
            continue
        comp, stack = set(), [node]
        while stack:
            cur = stack.pop()
            if cur not in comp:
                comp.add(cur)
                stack.extend(undirected[cur] - comp)
        seen |= comp
        comps.append(comp)
    return comps


def _deduce(q: list[str], params: dict[str, Any]) -> list[str]:
    """Parse ``x > y , ... | a ? b , c ? d ...`` and answer each query by transitivity.

    Also checks the fact structure: a main chain holding every queried letter and at most one
    distractor chain, and that each queried pair is at most ``hops`` facts apart.
    """
    facts_text, queries_text = " ".join(q).split(" | ")
    facts = [f.split() for f in facts_text.split(" , ")]
    assert all(len(f) == 3 and f[1] == ">" for f in facts), facts
    n_chain, n_dis = params["chain"], params["distractors"]
    assert len(facts) == n_chain - 1 + n_dis
    edges: dict[str, set[str]] = defaultdict(set)
    undirected: dict[str, set[str]] = defaultdict(set)
    for x, _, y in facts:
        assert x != y and x.isalpha() and y.isalpha()
        edges[x].add(y)
        undirected[x].add(y)
        undirected[y].add(x)
    queries = [query.split() for query in queries_text.split(" , ")]
    assert len(queries) == params["queries"], queries
    comps = _components(undirected)
    main = next(c for c in comps if queries[0][0] in c)
    assert len(main) == n_chain
    assert sorted(len(c) for c in comps if c is not main) == ([n_dis + 1] if n_dis else [])
    answers = []
    for a, op, b in queries:
        assert op == "?" and a != b and a in main and b in main
        forward, backward = _reaches(edges, a, b), _reaches(edges, b, a)
        assert forward != backward, "the query must be decided by the facts"
        assert 1 <= _distance(undirected, a, b) <= params["hops"], (a, b, params["hops"])
        answers.append(">" if forward else "<")
    return answers


def _split_queries(q: list[str], params: dict[str, Any]) -> list[list[str]]:
    """The ``|``-separated questions of a compare or parity example, checking their number."""
    parts = " ".join(q).split(" | ")
    assert len(parts) == params["queries"], parts
    return [part.split() for part in parts]


def reference_answer(task: str, params: dict[str, Any], question: str) -> list[str]:
    """The answer tokens of ``question`` (the decoded text before ``=``) at level ``params``."""
    q = question.split()
    if task in ("copy", "reverse", "sort"):
        assert len(q) == params["length"]  # decode() drops the blanks (pad tokens)
        vals = _values(q, params["alphabet"])
        out = {"copy": vals, "reverse": vals[::-1], "sort": sorted(vals)}[task]
        return [str(v) for v in out]
    if task == "compare":
        answers = []
        for pair in _split_queries(q, params):
            i = pair.index("?")
            a, b = pair[:i], pair[i + 1 :]
            assert len(a) == len(b) == params["digits"]
            x, y = _number(a), _number(b)
            answers.append(">" if x > y else "<" if x < y else "=")
        return answers
    if task == "parity":
        answers = []
        for bits in _split_queries(q, params):
            assert len(bits) == params["bits"] and set(bits) <= {"0", "1"}
            answers.append(str(bits.count("1") % 2))
        return answers
    if task in ("add", "mul"):
        sym = "+" if task == "add" else "*"
        i = q.index(sym)
        a, b = q[:i], q[i + 1 :]
        if task == "add":
            assert len(a) == len(b) == params["digits"]
            return _digits(_number(a) + _number(b), params["digits"] + 1)
        assert len(a) == params["digits_a"] and len(b) == params["digits_b"]
        return _digits(_number(a) * _number(b), len(a) + len(b))
    if task == "mod":
        a, op, b, word, p = q
        assert word == "mod" and op == params["op"] and int(p) == params["p"]
        x, y, m = int(a), int(b), int(p)
        assert 0 <= x < m and 0 <= y < m
        value = {"+": x + y, "-": x - y, "*": x * y}[op]
        return [str(value % m)]
    if task == "deduce":
        return _deduce(q, params)
    raise AssertionError(f"no reference for task {task!r}")
