"""The commutator defect against its known answers: on quadratic losses both forms are ||(BA - AB) theta|| /
(||A theta|| ||B theta||) for any step size; on a small network the finite-step value tends to the small-step one as
the step falls; measuring leaves the model untouched."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from capgeo_callbacks.measures.commutator import commutator, commutator_defect, model_commutator


def symmetric(n: int, generator: torch.Generator) -> Tensor:
    m = torch.randn(n, n, generator=generator, dtype=torch.float64)
    return (m + m.T) / 2


def quadratic_problem(n: int = 7, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    generator = torch.Generator().manual_seed(seed)
    a, b = symmetric(n, generator), symmetric(n, generator)
    assert torch.linalg.norm(a @ b - b @ a) > 1.0  # they do not commute
    return a, b, torch.randn(n, generator=generator, dtype=torch.float64)


def quadratic(matrix: Tensor, shapes: list[tuple[int, ...]]):
    """1/2 theta^T M theta, theta given in pieces of ``shapes`` (flattened in order)."""
    return lambda pieces: 0.5 * torch.cat([p.reshape(-1) for p in pieces]) @ matrix @ \
        torch.cat([p.reshape(-1) for p in pieces])


def known_answer(a: Tensor, b: Tensor, theta: Tensor) -> float:
    bracket = torch.linalg.norm((b @ a - a @ b) @ theta)
    return float(bracket / (torch.linalg.norm(a @ theta) * torch.linalg.norm(b @ theta)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_quadratic_losses_give_the_known_answer_in_both_forms_at_any_step(seed: int) -> None:
    a, b, theta = quadratic_problem(seed=seed)
    expected = known_answer(a, b, theta)
    shapes = [(3,), (2, 2)]  # theta in two tensors, as a model's weights are
    params = [theta[:3].clone(), theta[3:].reshape(2, 2).clone()]
    loss_a, loss_b = quadratic(a, shapes), quadratic(b, shapes)
    small = commutator(loss_a, loss_b, params)
    assert small.step_size is None and small.defect == pytest.approx(expected, rel=1e-12)
    assert small.grad_norm_a == pytest.approx(float(torch.linalg.norm(a @ theta)), rel=1e-12)
    assert small.grad_norm_b == pytest.approx(float(torch.linalg.norm(b @ theta)), rel=1e-12)
    for step_size in (1e-3, 0.1, 1.0):  # the steps' difference is exactly eta^2 (BA - AB) theta
        finite = commutator(loss_a, loss_b, params, step_size=step_size)
        assert finite.defect == pytest.approx(expected, rel=1e-9), step_size
    # the order of A and B does not matter; commuting matrices give 0
    assert commutator(loss_b, loss_a, params).defect == pytest.approx(expected, rel=1e-12)
    diagonal = torch.diag(torch.arange(1.0, 8.0, dtype=torch.float64))
    assert commutator(quadratic(diagonal, shapes), quadratic(diagonal ** 2, shapes), params).defect < 1e-14


def test_float32_weights_in_the_finite_form_are_measured_in_float64() -> None:
    a, b, theta = quadratic_problem()
    expected = known_answer(a, b, theta)
    params = [theta.float()]
    # at eta = 1e-3 float32 steps would round theta_AB - theta_BA (about 1e-6 of theta) away
    finite = commutator(quadratic(a, []), quadratic(b, []), params, step_size=1e-3)
    assert finite.defect == pytest.approx(known_answer(a, b, theta.float().double()), rel=1e-9)
    assert finite.defect == pytest.approx(expected, rel=1e-6)


def test_a_zero_gradient_gives_nan_and_bad_arguments_raise() -> None:
    theta = [torch.ones(3, dtype=torch.float64)]
    flat = lambda pieces: (pieces[0] * 0.0).sum()  # noqa: E731 - gradient 0
    bowl = lambda pieces: (pieces[0] ** 2).sum()  # noqa: E731
    for step_size in (None, 0.1):
        result = commutator(flat, bowl, theta, step_size=step_size)
        assert math.isnan(result.defect) and result.grad_norm_a == 0.0 and result.grad_norm_b > 0
    with pytest.raises(ValueError, match="step_size must be a positive finite number"):
        commutator(bowl, bowl, theta, step_size=0.0)
    with pytest.raises(ValueError, match="params is empty"):
        commutator(bowl, bowl, [])
    with pytest.raises(ValueError, match="must be a scalar"):
        commutator(lambda pieces: pieces[0] ** 2, bowl, theta)


class Net(nn.Module):
    """A small attention network (softmax attention, tanh, a linear head) over real inputs, mean-pooled to classes."""

    def __init__(self, dim: int = 6, classes: int = 3) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, classes)
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        y = F.scaled_dot_product_attention(q, k, v)  # fused kernel: forced onto the math path
        return self.out(torch.tanh(self.scale * y).mean(dim=1))


def net_problem(dtype: torch.dtype = torch.float64) -> tuple[nn.Module, tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    torch.manual_seed(0)
    model = Net().to(dtype).eval()
    x, y = torch.randn(64, 5, 6, dtype=torch.float64).to(dtype), torch.randint(0, 3, (64,))
    return model, (x[:32], y[:32]), (x[32:], y[32:])


def tuple_loss(output: Tensor, batch: tuple[Tensor, Tensor]) -> Tensor:
    return F.cross_entropy(output, batch[1])


def test_on_a_network_the_finite_step_value_tends_to_the_small_step_one() -> None:
    model, batch_a, batch_b = net_problem()
    limit = commutator_defect(model, tuple_loss, batch_a, batch_b)
    assert limit > 0.01  # two different batches: the steps do not commute
    errors = [abs(commutator_defect(model, tuple_loss, batch_a, batch_b, step_size=eta) - limit) / limit
              for eta in (1e-1, 1e-2, 1e-3, 1e-4)]
    assert errors[-1] < 1e-5
    # O(eta): about 10x smaller each decade
    assert all(later < earlier / 3 for earlier, later in zip(errors, errors[1:], strict=False))
    # the same batch twice: the steps commute
    assert commutator_defect(model, tuple_loss, batch_a, batch_a) < 1e-10


def test_float32_model_small_step_agrees_with_float64_and_finite_is_cast() -> None:
    model64, batch_a, batch_b = net_problem()
    model32, batch_a32, batch_b32 = net_problem(torch.float32)
    expected = commutator_defect(model64, tuple_loss, batch_a, batch_b)
    assert commutator_defect(model32, tuple_loss, batch_a32, batch_b32) == pytest.approx(expected, rel=1e-4)
    # the finite form casts the float32 weights, buffers and inputs to float64: no rounding at eta = 1e-3
    finite = commutator_defect(model32, tuple_loss, batch_a32, batch_b32, step_size=1e-3)
    assert finite == pytest.approx(expected, rel=1e-2)


def test_measuring_leaves_the_model_untouched() -> None:
    model, batch_a, batch_b = net_problem()
    before = {name: t.clone() for name, t in model.state_dict().items()}
    for step_size in (None, 1e-3):
        result = model_commutator(model, tuple_loss, batch_a, batch_b, step_size=step_size)
        assert result.defect > 0
    assert all(torch.equal(before[name], t) for name, t in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert not model.training


def test_frozen_parameters_are_not_differentiated() -> None:
    model, batch_a, batch_b = net_problem()
    model.qkv.requires_grad_(False)  # only the head is trained: the loss is convex in it
    model.out.weight.data.mul_(3)
    head = model_commutator(model, tuple_loss, batch_a, batch_b)
    assert head.grad_norm_a > 0 and head.defect > 0
    # by hand, on the head's weight and bias alone
    features = {}
    for name, batch in (("a", batch_a), ("b", batch_b)):
        q, k, v = model.qkv(batch[0]).chunk(3, dim=-1)
        features[name] = torch.tanh(model.scale * F.scaled_dot_product_attention(q, k, v)).mean(dim=1).detach()

    def head_loss(name: str, batch: tuple[Tensor, Tensor]):
        return lambda pieces: F.cross_entropy(features[name] @ pieces[0].T + pieces[1], batch[1])

    by_hand = commutator(head_loss("a", batch_a), head_loss("b", batch_b), [model.out.weight, model.out.bias])
    assert head.defect == pytest.approx(by_hand.defect, rel=1e-10)
