"""capgeo_callbacks.capture.batches.answer_scores: the one scoring of answers (models' val/acc and val/logprob, offline
analysis of Hugging Face revisions), against a direct computation over every position."""

from __future__ import annotations

import torch

from capgeo_callbacks.capture.batches import answer_cross_entropy, answer_scores


def test_answer_scores_equal_a_full_log_softmax_read_at_the_answers() -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 6, 11, generator=generator)
    targets = torch.randint(0, 11, (4, 6), generator=generator)
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask[:, 3:] = True
    targets[0, 3:] = logits[0, 3:].argmax(-1)  # example 0: every answer token right
    scores = answer_scores(logits, targets, mask.to(torch.int64))  # any mask dtype
    reference = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)[mask]
    torch.testing.assert_close(scores["token_logprob"], reference)
    right = logits.argmax(-1) == targets
    assert scores["exact"].tolist() == [float(bool(right[i, 3:].all())) for i in range(4)]
    assert scores["exact"][0] == 1.0
    assert scores["token_right"].tolist() == right[mask].float().tolist()
    # the loss is the mean of the same log-probs, negated
    loss = answer_cross_entropy(logits, {"targets": targets, "answer_mask": mask})
    torch.testing.assert_close(loss, -reference.mean())


def test_low_precision_logits_are_scored_in_float32_and_no_answer_is_no_token() -> None:
    logits = torch.randn(2, 3, 7).to(torch.bfloat16)
    targets = torch.zeros(2, 3, dtype=torch.long)
    scores = answer_scores(logits, targets, torch.ones(2, 3, dtype=torch.bool))
    assert scores["token_logprob"].dtype == torch.float32 and scores["token_logprob"].shape == (6,)
    empty = answer_scores(logits, targets, torch.zeros(2, 3, dtype=torch.bool))
    assert empty["exact"].tolist() == [1.0, 1.0] and empty["token_logprob"].numel() == 0
