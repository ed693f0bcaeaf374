"""What a model that ignores the question scores on a task's validation set: the chance level of a control.

A shuffled-answer control (or a task nobody learns) can still learn the answers' own distribution. Under
teacher forcing it also sees the answer's earlier tokens, so it can learn how an answer continues (a sorted
list never goes down) without reading the question. The level it is held to
(``capgeo_callbacks.detection.Chance``):

- ``exact``: the exact match of the most frequent whole answer on the validation set;
- ``token_acc`` and ``logprob``: those of a question-independent model of the answer, an order-``k`` Markov
  chain over the answer tokens (each token given its position and the ``k`` answer tokens before it), its
  estimates interpolated down to the position's marginal (Witten-Bell: a context's weight grows with its count
  against its number of distinct continuations), fitted on ``fit_examples`` training answers and scored on
  the validation answers, or those of each position's marginal on the validation answers, whichever is
  higher (sparse contexts can make the chain the worse of the two). It is a floor on what a
  question-independent model reaches, not a ceiling: a control that learns the answers' structure better is
  labelled for what it did.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import torch

from capgeo_callbacks.detection import Chance
from tasks.datamodule import TaskDataModule

__all__ = ["chance_level"]

ORDER = 2  # answer tokens of context: enough for the local structure of sorted or carried digits
FIT_EXAMPLES = 8192


def _answers(batch: dict[str, torch.Tensor]) -> list[tuple[int, ...]]:
    mask = batch["answer_mask"].to(torch.bool)
    return [tuple(row[keep].tolist()) for row, keep in zip(batch["targets"], mask, strict=True)]


def chance_level(datamodule: TaskDataModule, order: int = ORDER, fit_examples: int = FIT_EXAMPLES) -> Chance:
    """The chance level of ``datamodule``'s validation set (module docstring)."""
    answers = _answers(datamodule.eval_batch("val"))
    questions = len(answers)
    exact = Counter(answers).most_common(1)[0][1] / questions
    fitted = []
    for k in range(math.ceil(fit_examples / datamodule.batch_size)):
        fitted += _answers(datamodule.to_batch(datamodule.train_sequences(10_000_000 + k)))
    counts: dict[tuple, Counter] = defaultdict(Counter)
    for answer in fitted:
        for position, token in enumerate(answer):
            for k in range(order + 1):
                counts[(position, answer[max(0, position - k):position] if k else ())][token] += 1
    vocab = datamodule.vocab_size
    sizes = {context: (sum(seen.values()), len(seen)) for context, seen in counts.items()}

    def probability(position: int, before: tuple[int, ...], token: int) -> float:
        """Witten-Bell interpolation from the longest context down to the position's marginal."""
        estimate = 1.0 / vocab
        for k in range(order + 1):
            context = before[len(before) - k:] if k else ()
            if k > len(before):
                break
            seen = counts.get((position, context))
            if seen:
                total, types = sizes[(position, context)]
                estimate = (seen[token] + types * estimate) / (total + types)
        return estimate

    right = tokens = 0
    logprobs: list[float] = []
    best_after: dict[tuple[int, tuple[int, ...]], int | None] = {}  # the chain's guess depends on its context only
    for answer in answers:
        for position, token in enumerate(answer):
            before = answer[max(0, position - order):position]
            if (position, before) not in best_after:
                candidates = counts.get((position, ()), Counter())  # the tokens ever seen at this position
                best_after[(position, before)] = (max(candidates, key=lambda c: probability(position, before, c))
                                                  if candidates else None)
            best = best_after[(position, before)]
            right += best == token
            logprobs.append(math.log(probability(position, before, token)))
            tokens += 1
    marginal_right, marginal_logprobs = _marginal(answers)
    token_acc = max(right, marginal_right) / tokens
    if sum(marginal_logprobs) > sum(logprobs):
        logprobs = marginal_logprobs
    mean = sum(logprobs) / len(logprobs)
    sd = math.sqrt(sum((value - mean) ** 2 for value in logprobs) / max(1, len(logprobs) - 1))
    return Chance(exact=exact, token_acc=token_acc, logprob=mean, logprob_sd=sd, questions=questions, tokens=tokens)


def _marginal(answers: list[tuple[int, ...]]) -> tuple[int, list[float]]:
    """Tokens right, and each token's log-prob, under each answer position's own distribution (in sample)."""
    right = 0
    logprobs: list[float] = []
    for position in range(max(len(answer) for answer in answers)):
        column = Counter(answer[position] for answer in answers if len(answer) > position)
        count = sum(column.values())
        right += column.most_common(1)[0][1]
        logprobs += [math.log(n / count) for n in column.values() for _ in range(n)]
    return right, logprobs
