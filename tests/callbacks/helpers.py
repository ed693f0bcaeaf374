"""Test helpers shared by the gradient-based and probe callbacks' tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, Trainer, seed_everything
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor, nn
from torch.utils.data import DataLoader

from capgeo_callbacks.capture.batches import answer_cross_entropy
from tests.callbacks.conftest import ForeignEncoder, loaders, sum_mod_data


def tuple_loss(output: Tensor, batch: Sequence[Tensor]) -> Tensor:
    """The loss of ForeignEncoder's (x, y) batches."""
    return F.cross_entropy(output, batch[1])


def tuple_labels(batch: Sequence[Tensor]) -> Tensor:
    """The labels of ForeignEncoder's (x, y) batches, one per sequence."""
    return batch[1]


class _Block(nn.Module):
    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(self.ln_1(x)).unsqueeze(1).chunk(3, dim=-1)  # (B, 1, T, D) each
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).squeeze(1))
        return x + self.mlp(self.ln_2(x))


class TinyAnswerLM(pl.LightningModule):
    """A capgeo-like model: dict batches (input_ids, targets, answer_mask), ``blocks.*`` and ``norm_f``,
    attention through the fused SDPA kernel (no double backward unless the math path is forced)."""

    def __init__(self, vocab: int = 11, d_model: int = 16, seq_len: int = 8) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList([_Block(d_model)])
        self.norm_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, input_ids: Tensor) -> Tensor:
        x = self.embed(input_ids) + self.pos.weight[: input_ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm_f(x))

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return answer_cross_entropy(self(batch["input_ids"]), batch)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        right = (self(batch["input_ids"]).argmax(-1) == batch["targets"]) | ~batch["answer_mask"]
        self.log("val_acc", right.all(dim=1).float().mean(), batch_size=len(right))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def reverse_data(n: int, seed: int, digits: int = 4) -> list[dict[str, Tensor]]:
    """``d1 d2 d3 d4 = d4 d3 d2 d1``: inputs and next-token targets, the mask on the answer tokens."""
    x = torch.randint(0, 10, (n, digits), generator=torch.Generator().manual_seed(seed))
    seq = torch.cat([x, torch.full((n, 1), 10), x.flip(1)], dim=1)
    mask = torch.zeros(n, 2 * digits, dtype=torch.bool)
    mask[:, digits:] = True
    return [{"input_ids": seq[i, :-1], "targets": seq[i, 1:], "answer_mask": mask[i]} for i in range(n)]


def answer_loaders() -> tuple[DataLoader, DataLoader]:
    return (DataLoader(reverse_data(512, 0), batch_size=32, shuffle=False),
            DataLoader(reverse_data(128, 1), batch_size=64, shuffle=False))


def make_trainer(path: Path, callbacks: list[Callback], steps: int = 24) -> Trainer:
    return Trainer(
        max_steps=steps, val_check_interval=8, logger=TensorBoardLogger(str(path), name="", version=""),
        callbacks=callbacks, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, num_sanity_val_steps=1, accelerator="cpu", deterministic=True,
    )


def fit(path: Path, callbacks: list[Callback], steps: int = 24, model: pl.LightningModule | None = None,
        seed: int = 0) -> tuple[pl.LightningModule, Trainer]:
    seed_everything(seed, verbose=False)
    model = ForeignEncoder() if model is None else model
    train, val = loaders() if isinstance(model, ForeignEncoder) else answer_loaders()
    trainer = make_trainer(path, callbacks, steps)
    trainer.fit(model, train, val)
    return model, trainer


def assert_identical_training(path: Path, callbacks: list[Callback], steps: int = 16) -> None:
    """Training with ``callbacks`` ends at bit-identical weights, optimizer state and RNG state."""
    plain, plain_trainer = fit(path / "plain", [], steps=steps)
    plain_rng = torch.get_rng_state()
    watched, watched_trainer = fit(path / "watched", callbacks, steps=steps)
    assert torch.equal(plain_rng, torch.get_rng_state())
    for (name, a), (_, b) in zip(plain.state_dict().items(), watched.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    for a, b in zip(plain.parameters(), watched.parameters(), strict=True):
        assert (a.grad is None) == (b.grad is None) and (a.grad is None or torch.equal(a.grad, b.grad))
    plain_opt = plain_trainer.optimizers[0].state_dict()
    watched_opt = watched_trainer.optimizers[0].state_dict()
    assert plain_opt["param_groups"] == watched_opt["param_groups"]
    for key, state in plain_opt["state"].items():
        for field, value in state.items():
            assert torch.equal(value, watched_opt["state"][key][field]), (key, field)


class ValuesAtValidationEnd(Callback):
    """Reads ``monitor.values_at(step)`` in ``on_validation_end``, as PrecursorDetector does; listed before
    the monitor, so it runs first."""

    def __init__(self, monitor: Any) -> None:
        self.monitor = monitor
        self.seen: dict[int, dict[str, float]] = {}

    def on_validation_end(self, trainer: Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.seen[trainer.global_step] = self.monitor.values_at(trainer.global_step)


def first_examples(n: int) -> tuple[Tensor, Tensor]:
    x, y = sum_mod_data(512, 0).tensors
    return x[:n], y[:n]


# -- GradientRankMonitor ---------------------------------------------------------------------------


