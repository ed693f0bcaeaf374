"""The shuffled-answer negative control: questions kept, answers permuted across the batch, validation intact."""

from __future__ import annotations

import torch

from tasks import make_datamodule


def test_shuffled_answers_are_a_permutation_of_the_batch_answers() -> None:
    plain = make_datamodule("sort", "hard", seed=3, batch_size=64, val_size=16, test_size=16)
    shuffled = make_datamodule("sort", "hard", seed=3, batch_size=64, val_size=16, test_size=16,
                               shuffle_answers=True)
    a, b = plain.train_sequences(5), shuffled.train_sequences(5)
    q = plain.spec.question_len + 1  # question and "="
    assert torch.equal(a[:, :q], b[:, :q])
    answers = sorted(map(tuple, a[:, q:].tolist()))
    assert answers == sorted(map(tuple, b[:, q:].tolist()))  # the same answers, other questions
    assert (a[:, q:] != b[:, q:]).any(dim=1).float().mean() > 0.9  # almost every question gets another's
    assert torch.equal(b, shuffled.train_sequences(5))  # deterministic: the stream is still a function of k
    assert torch.equal(plain.eval_sequences("val"), shuffled.eval_sequences("val"))
