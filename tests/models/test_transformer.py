from __future__ import annotations

import pytest
import torch

from models import SIZES, build_model, math_attention
from models.lightning_module import answer_loss, answer_metrics

VOCAB = 170


@pytest.mark.slow
def test_sizes_are_ordered_and_counts_in_range() -> None:
    counts = [build_model(size, VOCAB, 64).num_parameters() for size in SIZES]
    assert counts == sorted(counts)
    assert 380_000 <= counts[0] <= 430_000
    assert 140_000_000 <= counts[-1] <= 160_000_000
    ratios = [b / a for a, b in zip(counts, counts[1:], strict=False)]
    assert all(2.0 < r < 5.0 for r in ratios), ratios  # roughly geometric


def test_parameter_count_does_not_depend_on_context_length() -> None:
    assert build_model("xs", VOCAB, 16).num_parameters() == build_model("xs", VOCAB, 512).num_parameters()


def test_unknown_size_names_valid_ones() -> None:
    with pytest.raises(ValueError, match="valid sizes: xs, s, m"):
        build_model("huge", VOCAB, 16)


def test_forward_shape_and_causality() -> None:
    torch.manual_seed(0)
    model = build_model("xs", VOCAB, 32).eval()
    ids = torch.randint(0, VOCAB, (3, 20))
    logits = model(ids)
    assert logits.shape == (3, 20, VOCAB)
    changed = ids.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % VOCAB
    # positions before the change cannot see it
    torch.testing.assert_close(model(changed)[:, :10], logits[:, :10])
    assert not torch.allclose(model(changed)[:, 10:], logits[:, 10:])


def test_math_attention_matches_fused_and_has_double_backward() -> None:
    torch.manual_seed(0)
    model = build_model("xs", VOCAB, 32).eval()
    ids = torch.randint(0, VOCAB, (2, 12))
    fused = model(ids)
    with math_attention():
        explicit = model(ids)
        loss = explicit.logsumexp(-1).mean()
        params = [p for p in model.parameters()]
        grads = torch.autograd.grad(loss, params, create_graph=True)
        vector = [torch.randn_like(p) for p in params]
        hvp = torch.autograd.grad(sum((g * v).sum() for g, v in zip(grads, vector, strict=True)), params)
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=1e-4)
    assert all(torch.isfinite(h).all() for h in hvp)
    assert any(h.abs().sum() > 0 for h in hvp)


def test_answer_metrics_on_known_logits() -> None:
    targets = torch.tensor([[1, 2, 3], [1, 2, 3]])
    mask = torch.tensor([[False, True, True], [False, True, True]])
    logits = torch.full((2, 3, 5), -10.0)
    logits[0, torch.arange(3), targets[0]] = 10.0  # example 0 fully right
    logits[1, 0, 1] = 10.0
    logits[1, 1, 2] = 10.0
    logits[1, 2, 0] = 10.0  # example 1: last answer token wrong
    metrics = answer_metrics(logits, targets, mask)
    assert metrics["acc"].item() == pytest.approx(0.5)
    log_probs = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    expected = log_probs[mask].mean()
    assert metrics["logprob"].item() == pytest.approx(expected.item())
    assert answer_loss(logits, targets, mask).item() == pytest.approx(-expected.item(), rel=1e-5)
