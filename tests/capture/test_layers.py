from __future__ import annotations

import pytest
import torch
from torch import nn

from capgeo_callbacks.capture.layers import glob_match, output_tensor, resolve_layers, short_names
from capgeo_callbacks.capture.selectors import SelectorError, select_rows, validate_selector


class Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = nn.Module()
        self.model.blocks = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3))
        self.model.norm_f = nn.LayerNorm(4)


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("blocks.*", "blocks.0", True),
        ("blocks.*", "blocks.0.0", False),  # '*' does not cross a dot
        ("blocks.**", "blocks.0.0", True),
        ("**.norm_f", "norm_f", True),  # '**' matches zero components
        ("**.norm_f", "model.norm_f", True),
        ("model.blocks.1", "model.blocks.1", True),
        ("model.blocks.1", "model.blocks.10", False),
        ("model.block?.2", "model.blocks.2", True),
    ],
)
def test_glob_match(pattern: str, name: str, expected: bool) -> None:
    assert glob_match(pattern, name) is expected


def test_resolve_layers_in_depth_order() -> None:
    names = resolve_layers(Toy(), ["**.norm_f", "**.blocks.*"])
    assert names == ["model.blocks.0", "model.blocks.1", "model.blocks.2", "model.norm_f"]
    assert short_names(names) == {n: n.removeprefix("model.") for n in names}
    assert short_names(["model.norm_f"]) == {"model.norm_f": "model.norm_f"}
    # numbered layers keep their container's name (an HF GPT-2's blocks are transformer.h.<i>)
    gpt2 = ["transformer.h.0", "transformer.h.1", "transformer.ln_f"]
    assert short_names(gpt2) == {"transformer.h.0": "h.0", "transformer.h.1": "h.1", "transformer.ln_f": "ln_f"}
    assert short_names(gpt2[:2]) == {"transformer.h.0": "h.0", "transformer.h.1": "h.1"}


def test_unmatched_pattern_lists_close_names() -> None:
    with pytest.raises(ValueError, match=r"'model\.blocks\.9' matches no module; closest: model\.blocks\."):
        resolve_layers(Toy(), ["model.blocks.9"])


def test_output_tensor_conventions() -> None:
    t = torch.zeros(2, 3)
    assert output_tensor(t) is t
    assert output_tensor((t, None)) is t
    assert output_tensor({"h": t}) is None


def test_selectors() -> None:
    hidden = torch.arange(2 * 3 * 4, dtype=torch.float32).view(2, 3, 4)
    mask = torch.tensor([[False, True, True], [False, False, True]])
    answer = select_rows(hidden, {"answer_mask": mask}, "answer")
    torch.testing.assert_close(answer, torch.stack([hidden[0, 1], hidden[0, 2], hidden[1, 2]]))
    torch.testing.assert_close(select_rows(hidden, None, "last"), hidden[:, -1])
    torch.testing.assert_close(select_rows(hidden, None, "mean"), hidden.mean(1))
    assert select_rows(hidden, None, "all").shape == (6, 4)
    assert select_rows(hidden, None, lambda h, b: h[:, 0]).shape == (2, 4)
    with pytest.raises(SelectorError, match="needs batch\\['answer_mask'\\]"):
        select_rows(hidden, (hidden, None), "answer")
    with pytest.raises(ValueError, match="valid: target, answer, first_answer, question_mean, last, mean, all"):
        validate_selector("first")
