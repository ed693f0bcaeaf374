"""What a model that ignores the question scores on a task's validation set: the chance level of a control.

A shuffled-answer control (or a task nobody learns) can still learn the answers' distribution: which whole
answer is most frequent, which token is most frequent at each answer position. That is the level it is
held to (``capgeo_callbacks.detection.Chance``): exact match of the most frequent whole answer, per-token
accuracy of each position's most frequent token, and the mean log-probability of the answer tokens under
each position's empirical distribution. All three are computed on the validation set itself, so they are
exactly what an input-independent answer scores there.
"""

from __future__ import annotations

import math
from collections import Counter

import torch

from capgeo_callbacks.detection import Chance
from tasks.datamodule import TaskDataModule

__all__ = ["chance_level"]


def chance_level(datamodule: TaskDataModule) -> Chance:
    """The chance level of ``datamodule``'s validation set (module docstring)."""
    batch = datamodule.eval_batch("val")
    mask = batch["answer_mask"].to(torch.bool)
    answers = [tuple(row[keep].tolist()) for row, keep in zip(batch["targets"], mask, strict=True)]
    questions = len(answers)
    exact = Counter(answers).most_common(1)[0][1] / questions
    right = tokens = 0
    logprobs: list[float] = []
    for position in range(max(len(answer) for answer in answers)):
        column = Counter(answer[position] for answer in answers if len(answer) > position)
        count = sum(column.values())
        right += column.most_common(1)[0][1]
        tokens += count
        logprobs += [math.log(n / count) for n in column.values() for _ in range(n)]
    mean = sum(logprobs) / len(logprobs)
    sd = math.sqrt(sum((value - mean) ** 2 for value in logprobs) / max(1, len(logprobs) - 1))
    return Chance(exact=exact, token_acc=right / tokens, logprob=mean, logprob_sd=sd, questions=questions,
                  tokens=tokens)
