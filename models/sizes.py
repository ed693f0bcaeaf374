"""The six model sizes, smallest first, and :func:`build_model`."""

from __future__ import annotations

from dataclasses import replace

from models.transformer import ModelConfig, Transformer

# Roughly geometric growth (about 3x per step) from ~0.4M to ~151M parameters; head dim 64.
SIZES: dict[str, ModelConfig] = {
    "xs": ModelConfig(n_layer=2, d_model=128, n_head=2),
    "s": ModelConfig(n_layer=4, d_model=192, n_head=3),
    "m": ModelConfig(n_layer=6, d_model=256, n_head=4),
    "l": ModelConfig(n_layer=8, d_model=384, n_head=6),
    "xl": ModelConfig(n_layer=10, d_model=640, n_head=10),
    "xxl": ModelConfig(n_layer=12, d_model=1024, n_head=16),
}


def size_config(size: str, vocab_size: int, max_seq_len: int, **overrides: object) -> ModelConfig:
    """The :class:`ModelConfig` of ``size`` for a given vocabulary and context length."""
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}; valid sizes: {', '.join(SIZES)}")
    return replace(SIZES[size], vocab_size=vocab_size, max_seq_len=max_seq_len, **overrides)


def build_model(size: str, vocab_size: int, max_seq_len: int, **overrides: object) -> Transformer:
    """Build the transformer of ``size`` (a key of :data:`SIZES`)."""
    return Transformer(size_config(size, vocab_size, max_seq_len, **overrides))
