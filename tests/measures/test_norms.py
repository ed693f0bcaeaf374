"""parameter_norm against the norm of the flattened, concatenated parameters."""

from __future__ import annotations

import math

import torch

from capgeo_callbacks.measures import parameter_norm


def test_equals_the_norm_of_all_parameters_as_one_vector() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
    flat = torch.cat([p.detach().double().flatten() for p in model.parameters()])
    assert math.isclose(parameter_norm(model.parameters()), float(flat.norm()), rel_tol=1e-12)


def test_known_answer_order_and_empty() -> None:
    a, b = torch.tensor([3.0, 0.0]), torch.tensor([[4.0]])
    assert parameter_norm([a, b]) == 5.0 == parameter_norm([b, a])
    assert parameter_norm([]) == 0.0
    assert not math.isfinite(parameter_norm([torch.tensor([float("nan"), 1.0])]))
