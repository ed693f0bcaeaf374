"""The chance level of a task's validation set, against direct counts and known answers."""

from __future__ import annotations

import math

import pytest
import torch

import tasks
from tasks.chance import chance_level


@pytest.mark.parametrize("task", ["parity", "sort", "mul"])
def test_chance_level_matches_direct_counts(task: str) -> None:
    dm = tasks.make_datamodule(task, "hard", seed=0, val_size=512, test_size=512)
    chance = chance_level(dm)
    batch = dm.eval_batch("val")
    answers = torch.stack([row[mask.bool()] for row, mask in zip(batch["targets"], batch["answer_mask"], strict=True)])
    # exact: the most frequent whole answer, by torch.unique's counts
    _, counts = torch.unique(answers, dim=0, return_counts=True)
    assert chance.exact == pytest.approx(counts.max().item() / answers.shape[0])
    # token accuracy and log-prob: at least each position's marginal (mode by torch.mode, entropy directly);
    # the Markov chain over the answer's own earlier tokens may do better, never worse
    modes = torch.mode(answers, dim=0).values
    assert chance.token_acc >= (answers == modes).float().mean().item() - 1e-12
    entropy = 0.0
    for column in answers.T:
        p = torch.unique(column, return_counts=True)[1].double() / column.numel()
        entropy += -(p * p.log()).sum().item()
    assert chance.logprob >= -entropy / answers.shape[1] - 1e-9
    assert (chance.questions, chance.tokens) == (512, answers.numel())


def test_a_sorted_answer_is_predictable_from_its_own_prefix() -> None:
    """Under teacher forcing a control sees the answer's earlier tokens: a sorted list never goes down, so a
    question-independent model beats each position's marginal, and chance must say so."""
    dm = tasks.make_datamodule("sort", "hard", seed=0, val_size=512, test_size=512, batch_size=64)
    chance = chance_level(dm)
    batch = dm.eval_batch("val")
    answers = torch.stack([row[mask.bool()] for row, mask in zip(batch["targets"], batch["answer_mask"], strict=True)])
    marginal = (answers == torch.mode(answers, dim=0).values).float().mean().item()
    assert chance.token_acc > marginal + 0.1


def test_parity_is_a_coin_per_query() -> None:
    chance = chance_level(tasks.make_datamodule("parity", "hard", seed=1, val_size=512, test_size=512))
    # each position's mode is right on max(p, 1 - p) of 512 fair bits: 0.5 plus at most 3 standard deviations
    assert 0.5 <= chance.token_acc <= 0.5 + 3 * math.sqrt(0.25 / 512)
    assert chance.logprob == pytest.approx(math.log(0.5), abs=0.01)
    assert 0.25 <= chance.exact <= 0.33  # the most frequent of four two-bit answers
