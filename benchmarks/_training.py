"""Plain AdamW steps on a task's training stream, so a benchmark's model is not at initialisation."""

from __future__ import annotations

import torch
from torch import nn

from models.lightning_module import answer_loss
from tasks import TaskDataModule


def pretrain(model: nn.Module, datamodule: TaskDataModule, steps: int, lr: float = 1e-3,
             weight_decay: float = 0.01) -> None:
    """``steps`` AdamW steps on the answer-masked loss (no Lightning), then eval mode."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    model.train()
    for k in range(steps):
        batch = datamodule.train_batch(k)
        loss = answer_loss(model(batch["input_ids"]), batch["targets"], batch["answer_mask"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    model.eval()
