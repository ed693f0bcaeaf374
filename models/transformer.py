"""A decoder-only, pre-norm transformer in the spirit of nanoGPT's ``model.py``.

Design choices (documented in the README):
- rotary position embeddings (no learned position table, so the parameter count does not depend on
  ``max_seq_len``);
- tied input/output embeddings;
- no biases, RMS-free plain ``LayerNorm`` with weight only;
- attention through ``F.scaled_dot_product_attention`` by default, or an explicit "math" path that
  supports double backward (Hessian-vector products), switchable at run time with
  :func:`math_attention`.

Readable module names for hooks: ``blocks.<i>`` is the residual stream after block ``i``,
``norm_f`` the final norm before the unembedding.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class ModelConfig:
    """Shape of one transformer size."""

    n_layer: int
    d_model: int
    n_head: int
    vocab_size: int = 0
    max_seq_len: int = 0
    mlp_ratio: int = 4
    dropout: float = 0.0
    rope_base: float = 10000.0


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (Su et al., 2021) with cached cos/sin tables (buffers, not weights)."""

    def __init__(self, head_dim: int, max_seq_len: int, base: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), inv_freq)  # (T, hd/2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, H, T, hd)
        seq_len = x.shape[-2]
        cos, sin = self.cos[:seq_len].to(x.dtype), self.sin[:seq_len].to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return rotated.flatten(-2)


_USE_MATH_ATTENTION = False


@contextlib.contextmanager
def math_attention() -> Iterator[None]:
    """Run attention on the explicit math path (double-backward safe) inside this block."""
    global _USE_MATH_ATTENTION
    previous = _USE_MATH_ATTENTION
    _USE_MATH_ATTENTION = True
    try:
        yield
    finally:
        _USE_MATH_ATTENTION = previous


def causal_attention(q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0) -> Tensor:
    """Causal softmax attention; fused kernel unless :func:`math_attention` is active."""
    if not _USE_MATH_ATTENTION:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    seq_len = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    mask = torch.ones(seq_len, seq_len, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.dropout(scores.softmax(dim=-1), p=dropout_p)
    return weights @ v


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.rotary = RotaryEmbedding(cfg.d_model // cfg.n_head, cfg.max_seq_len, cfg.rope_base)
        self.dropout = cfg.dropout

    def forward(self, x: Tensor) -> Tensor:
        batch, seq_len, d_model = x.shape
        q, k, v = self.qkv(x).split(d_model, dim=2)
        # (B, T, D) -> (B, H, T, hd)
        q, k, v = (t.view(batch, seq_len, self.n_head, -1).transpose(1, 2) for t in (q, k, v))
        q, k = self.rotary(q), self.rotary(k)
        dropout_p = self.dropout if self.training else 0.0
        y = causal_attention(q, k, v, dropout_p)
        y = y.transpose(1, 2).reshape(batch, seq_len, d_model)  # (B, T, D)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-norm block; its output is the residual stream after this layer."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm_attn = nn.LayerNorm(cfg.d_model, bias=False)
        self.attn = CausalSelfAttention(cfg)
        self.norm_mlp = nn.LayerNorm(cfg.d_model, bias=False)
        self.mlp = MLP(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.drop(self.attn(self.norm_attn(x)))
        return x + self.drop(self.mlp(self.norm_mlp(x)))


class Transformer(nn.Module):
    """Decoder-only transformer: token ids (B, T) -> logits (B, T, vocab)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.vocab_size <= 0 or cfg.max_seq_len <= 0:
            raise ValueError(
                f"vocab_size and max_seq_len must be positive, got {cfg.vocab_size}, {cfg.max_seq_len}"
            )
        if cfg.d_model % cfg.n_head:
            raise ValueError(f"d_model {cfg.d_model} is not divisible by n_head {cfg.n_head}")
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm_f = nn.LayerNorm(cfg.d_model, bias=False)
        self.apply(self._init_weights)
        # GPT-2 style: scale residual projections by depth.
        for name, param in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, input_ids: Tensor) -> Tensor:
        if input_ids.shape[1] > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {input_ids.shape[1]} exceeds max_seq_len {self.cfg.max_seq_len}")
        x = self.drop(self.embed(input_ids))  # (B, T, D)
        for block in self.blocks:
            x = block(x)
        x = self.norm_f(x)
        return x @ self.embed.weight.T  # tied unembedding: (B, T, vocab)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
