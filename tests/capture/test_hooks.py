"""The capture's forward hooks keep copies of the selected rows: what the model does to its outputs afterwards (an
in-place update of a buffer it returns) does not reach them, whichever selector picked them."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from capgeo_callbacks.capture.hooks import HiddenStateCapture
from capgeo_callbacks.capture.selectors import select_rows


class ReusedBuffer(nn.Module):
    """Returns the same output tensor at every call, overwritten in place (as a module with a preallocated output
    would)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.out = torch.zeros(shape)

    def forward(self, x: Tensor) -> Tensor:
        return self.out.copy_(x)


@pytest.mark.parametrize("selector", ["first_answer", "answer", "all", "last", "mean",
                                      lambda hidden, batch: hidden[:, 0]])
def test_kept_rows_do_not_change_when_the_model_overwrites_its_output(selector) -> None:
    torch.manual_seed(0)
    batch = {"answer_mask": torch.tensor([[0, 1, 1], [0, 0, 1]], dtype=torch.bool)}
    module = ReusedBuffer((2, 3, 4))
    capture = HiddenStateCapture(selector, num_rows=16)
    with capture.attached({"layer": module}):
        capture.set_batch(batch)
        first = torch.randn(2, 3, 4)
        module(first)
        capture.set_batch(None)
        module(torch.randn(2, 3, 4))  # the next call overwrites the tensor the first returned
    rows, _ = capture.take()["layer"]
    assert rows.shape[0] > 0 and torch.equal(rows, select_rows(first, batch, selector))
    assert rows.untyped_storage().data_ptr() != module.out.untyped_storage().data_ptr()
