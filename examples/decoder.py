"""A small decoder-only transformer named like Hugging Face Llama models, as a user's own model would be: the one the
gallery's ``own_model.py`` and the new task families (``examples/new_tasks``) are learned by.

Module names follow Llama's (``embed_tokens``, ``layers.N`` with ``self_attn`` and ``mlp``, ``norm``), so a user's
``RankMeMonitor(layers=["model.layers.*", "model.norm"])`` watches it as the README prints. The whole model::

    Decoder(vocab, length, dim, layers, heads)(inputs)  # (B, T) token ids -> (B, T, dim) hidden states, final-normed
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Attention", "Decoder", "DecoderLayer"]


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv_proj = nn.Linear(dim, 3 * dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv_proj(x).view(batch, length, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, heads, T, dim / heads)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, dim))


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(dim)
        self.self_attn = Attention(dim, heads)
        self.post_attention_layernorm = nn.RMSNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.SiLU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, vocab: int, length: int, dim: int, layers: int, heads: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.embed_positions = nn.Embedding(length, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(inputs) + self.embed_positions(torch.arange(inputs.shape[1], device=inputs.device))
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)  # (B, T, dim)
