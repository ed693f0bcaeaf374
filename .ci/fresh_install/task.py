"""The user's model and data, shared by the two scripts: a tiny Hugging Face Llama (built from a LlamaConfig) learning
``a b = (a + b) mod 23`` from dict batches as a Hugging Face model takes them (``input_ids``, ``labels`` unshifted,
-100 but at the answer). Nothing in it is written for capgeo."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

P = 23  # tokens 0..P-1 are numbers, P is "="


def llama() -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=P + 1, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=8,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return LlamaForCausalLM(config)


class Addition(torch.utils.data.Dataset):
    """``a b = c`` with ``labels`` -100 but at ``c``; ``distinct``: no question twice."""

    def __init__(self, examples: int, seed: int, distinct: bool = False) -> None:
        generator = torch.Generator().manual_seed(seed)
        if distinct:
            pairs = torch.randperm(P * P, generator=generator)[:examples]
            a, b = pairs // P, pairs % P
        else:
            a, b = torch.randint(0, P, (2, examples), generator=generator)
        self.input_ids = torch.stack([a, b, torch.full_like(a, P), (a + b) % P], dim=1)
        self.labels = torch.full_like(self.input_ids, -100)
        self.labels[:, -1] = self.input_ids[:, -1]

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids[i], "labels": self.labels[i]}


def accuracy(model: LlamaForCausalLM, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The share of questions whose answer the model gives (the state at ``=`` predicts it)."""
    logits = model(input_ids=batch["input_ids"]).logits
    return (logits[:, -2].argmax(-1) == batch["input_ids"][:, -1]).float().mean()
