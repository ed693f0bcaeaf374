"""capgeo_callbacks.capture.batches: the one scoring of answers (models' val/acc and val/logprob, offline analysis of
Hugging Face revisions), against a direct computation over every position; and the targets found in users'
batches (the probes' labels)."""

from __future__ import annotations

import pytest
import torch

from capgeo_callbacks.capture.batches import (
    TargetsNotFound,
    answer_cross_entropy,
    answer_scores,
    find_targets,
    target_labels,
)


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


def test_targets_are_found_in_the_shapes_users_batches_have() -> None:
    x = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    answer = torch.tensor([[-100, -100, 9, 10], [-100, -100, 11, 12]])
    found = find_targets((x, answer))  # (inputs, next-token targets): already aligned
    assert found.source == "batch[1]" and torch.equal(found.labels(), torch.tensor([9, 10, 11, 12]))
    # Hugging Face labels are unshifted: position t's label is labels[t + 1]
    found = find_targets({"input_ids": x, "labels": answer})
    assert torch.equal(found.values, torch.tensor([[-100, 9, 10, -100], [-100, 11, 12, -100]]))
    # capgeo's answer mask
    mask = answer != -100
    found = find_targets({"input_ids": x, "targets": torch.where(mask, answer, 0), "answer_mask": mask})
    assert torch.equal(found.labels(), torch.tensor([9, 10, 11, 12]))
    # every position has a target (plain language modelling): the last one that has a target, per sequence
    assert torch.equal(find_targets((x, x + 1)).labels(), torch.tensor([5, 9]))
    assert torch.equal(find_targets({"input_ids": x, "labels": x}).labels(), torch.tensor([4, 8]))
    padded = {"input_ids": x, "labels": x, "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])}
    assert torch.equal(target_labels(padded), torch.tensor([4, 6]))
    # one label per example
    assert torch.equal(target_labels((torch.zeros(2, 3, 8, 8), torch.tensor([3, 1]))), torch.tensor([3, 1]))
    assert not find_targets({"pixel_values": x, "label": torch.tensor([0, 1])}).per_position


def test_a_batch_without_targets_names_what_was_looked_for() -> None:
    for batch in (torch.zeros(2, 3), {"input_ids": torch.zeros(2, 3, dtype=torch.long)}, (torch.zeros(2, 3),
                                                                                             torch.zeros(2))):
        with pytest.raises(TargetsNotFound, match=r"looked for a tuple \(inputs, targets\); a dict's 'labels'"):
            find_targets(batch)
