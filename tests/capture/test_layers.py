from __future__ import annotations

import pytest
import torch
from torch import nn

from capgeo_callbacks.capture.layers import (
    BlocksNotFound,
    describe_blocks,
    find_blocks,
    glob_match,
    output_tensor,
    resolve_layers,
    short_names,
)
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


# -- find_blocks: the common layouts, each on a real model class built from a tiny config ------------------------
def _hf_models() -> dict[str, nn.Module]:
    transformers = pytest.importorskip("transformers")
    small = {"vocab_size": 32, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
             "num_attention_heads": 2, "max_position_embeddings": 16}
    return {
        "llama": transformers.LlamaForCausalLM(transformers.LlamaConfig(**small, num_key_value_heads=2)),
        "gpt2": transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=32, n_embd=16, n_layer=2, n_head=2,
                                                                    n_positions=16, bos_token_id=0, eos_token_id=0)),
        "gpt_neox": transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**small)),
        "bert": transformers.BertModel(transformers.BertConfig(**small)),
    }


class TimmLikeViT(nn.Module):
    """timm's VisionTransformer layout (``patch_embed``, ``blocks`` an ``nn.Sequential`` of blocks, ``norm``), built
    by hand: timm's wheel pulls its own torch build."""

    def __init__(self, dim: int = 16, depth: int = 3) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=4, stride=4)
        self.blocks = nn.Sequential(*(nn.TransformerEncoderLayer(dim, 2, 32, batch_first=True) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.fc_norm = nn.Identity()
        self.head = nn.Linear(dim, 10)


EXPECTED_BLOCKS = {
    "llama": ["model.layers.0", "model.layers.1", "model.norm"],
    "gpt2": ["transformer.h.0", "transformer.h.1", "transformer.ln_f"],
    "gpt_neox": ["gpt_neox.layers.0", "gpt_neox.layers.1", "gpt_neox.final_layer_norm"],
    "bert": ["encoder.layer.0", "encoder.layer.1"],  # an encoder without a final norm
}


def test_find_blocks_in_hugging_face_layouts() -> None:
    models = _hf_models()
    for name, model in models.items():
        assert find_blocks(model) == EXPECTED_BLOCKS[name], name
        assert resolve_layers(model, find_blocks(model)) == EXPECTED_BLOCKS[name]  # names of real modules

    class Module(nn.Module):  # a LightningModule's `self.model = LlamaForCausalLM(...)`, beside a head of its own
        def __init__(self) -> None:
            super().__init__()
            self.model = models["llama"]
            self.classifier = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2))  # not a stack of blocks

    assert find_blocks(Module()) == ["model.model.layers.0", "model.model.layers.1", "model.model.norm"]


def test_find_blocks_in_torch_timm_and_capgeo_layouts() -> None:
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    with_norm = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(16), enable_nested_tensor=False)
    assert find_blocks(with_norm) == ["layers.0", "layers.1", "norm"]
    assert find_blocks(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)) == ["layers.0", "layers.1"]
    assert find_blocks(TimmLikeViT()) == ["blocks.0", "blocks.1", "blocks.2", "norm"]
    assert find_blocks(Toy()) == ["model.blocks.0", "model.blocks.1", "model.blocks.2", "model.norm_f"]
    assert describe_blocks(find_blocks(Toy())) == ("model.blocks.0 to model.blocks.2 (3 blocks) and the final norm "
                                                   "model.norm_f")


def test_find_blocks_says_what_it_looked_for() -> None:
    with pytest.raises(BlocksNotFound, match=r"found no transformer blocks in Sequential: looked for a stack .* "
                                             r"named layers, h, layer, blocks.*Pass layers=\[\.\.\.\]"):
        find_blocks(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)))
    # an encoder and a decoder side by side: which to watch is the user's choice
    with pytest.raises(BlocksNotFound, match=r"several stacks .* encoder\.layers\.0 .* decoder\.layers\.0 .*"
                                             r"layers=\['encoder\.layers\.\*'\]"):
        find_blocks(nn.Transformer(16, 2, 1, 1, 32, batch_first=True))
