"""A small Lightning model capgeo did not write (on torch.nn.TransformerEncoder), and helpers."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class ForeignEncoder(pl.LightningModule):
    """Classify the sum of a token sequence mod 4 with a stock nn.TransformerEncoder (tuple batches)."""

    def __init__(self, vocab: int = 8, d_model: int = 32, layers: int = 2, seq_len: int = 6) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead=2, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x)).mean(dim=1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self(x).argmax(-1) == y).float().mean(), on_epoch=True, batch_size=len(x))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def sum_mod_data(n: int, seed: int, vocab: int = 8, seq_len: int = 6) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (n, seq_len), generator=generator)
    return TensorDataset(x, x.sum(dim=1) % 4)


def loaders(batch_size: int = 32) -> tuple[DataLoader, DataLoader]:
    return (DataLoader(sum_mod_data(512, 0), batch_size=batch_size, shuffle=False),
            DataLoader(sum_mod_data(256, 1), batch_size=64, shuffle=False))


def read_events(logdir: str | Path) -> EventAccumulator:
    files = sorted(Path(logdir).rglob("events.out.tfevents.*"))
    assert files, f"no event files under {logdir}"
    accumulator = EventAccumulator(str(files[0].parent), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def reference_rankme(z: np.ndarray, eps: float = 1e-7) -> float:
    """RankMe from numpy's float64 SVD, independent of capgeo's implementation."""
    s = np.linalg.svd(z.astype(np.float64), compute_uv=False)
    p = s / s.sum() + eps
    return float(np.exp(-(p * np.log(p)).sum()))
