"""The LightningModule that trains a capgeo transformer on an algorithmic task.

Logged keys:
    ``train/loss``: answer-masked cross-entropy of the training batch.
    ``val/loss``: answer-masked cross-entropy on the validation set.
    ``val/acc``: exact match of the whole answer (every answer token right under teacher-forced argmax).
    ``val/logprob``: mean log-probability of the correct answer tokens (the negative of ``val/loss``
    token-weighted; logged under its own name because detection reads it as "log-prob emergence").
"""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor

from models.sizes import build_model

Batch = dict[str, Tensor]


def answer_loss(logits: Tensor, targets: Tensor, answer_mask: Tensor) -> Tensor:
    """Mean cross-entropy over answer tokens only."""
    per_token = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    mask = answer_mask.flatten().to(per_token.dtype)
    return (per_token * mask).sum() / mask.sum().clamp_min(1.0)


def answer_metrics(logits: Tensor, targets: Tensor, answer_mask: Tensor) -> dict[str, Tensor]:
    """Exact-match accuracy, mean answer-token log-prob and loss for one batch."""
    log_probs = logits.float().log_softmax(dim=-1)
    target_log_probs = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
    mask = answer_mask.to(target_log_probs.dtype)
    logprob = (target_log_probs * mask).sum() / mask.sum().clamp_min(1.0)
    correct = (logits.argmax(dim=-1) == targets) | ~answer_mask
    return {"acc": correct.all(dim=1).float().mean(), "logprob": logprob, "loss": -logprob}


class CapabilityModule(pl.LightningModule):
    """Trains one transformer size with AdamW, linear warm-up and cosine decay, on answer tokens.

    Args:
        size: a key of :data:`models.SIZES`.
        vocab_size: the task vocabulary size.
        max_seq_len: the longest input sequence.
        lr: peak learning rate.
        weight_decay: AdamW weight decay on matrices (not on norms).
        warmup_steps: linear warm-up length.
        max_steps: total steps, for the cosine decay (to ``min_lr_ratio * lr``).
        min_lr_ratio: final learning rate as a fraction of ``lr``.
        betas: AdamW betas.
        dropout: dropout rate in the blocks.
    """

    def __init__(
        self,
        size: str = "xs",
        vocab_size: int = 0,
        max_seq_len: int = 0,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        warmup_steps: int = 100,
        max_steps: int = 1000,
        min_lr_ratio: float = 0.1,
        betas: tuple[float, float] = (0.9, 0.98),
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = build_model(size, vocab_size, max_seq_len, dropout=dropout)

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.model(input_ids)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        logits = self(batch["input_ids"])
        loss = answer_loss(logits, batch["targets"], batch["answer_mask"])
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def _evaluate(self, batch: Batch, prefix: str) -> None:
        logits = self(batch["input_ids"])
        metrics = answer_metrics(logits, batch["targets"], batch["answer_mask"])
        batch_size = batch["input_ids"].shape[0]
        for name, value in metrics.items():
            self.log(
                f"{prefix}/{name}", value, on_step=False, on_epoch=True, batch_size=batch_size,
                sync_dist=True, prog_bar=name == "acc",
            )

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Record this class's dotted path, so offline analysis can rebuild it without being told."""
        capgeo = checkpoint.setdefault("capgeo", {})
        capgeo["module_class"] = f"{type(self).__module__}.{type(self).__qualname__}"

    def configure_optimizers(self) -> Any:
        hp = self.hparams
        decay = [p for p in self.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.requires_grad and p.dim() < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=hp.lr, betas=tuple(hp.betas),
        )

        def lr_lambda(step: int) -> float:
            if step < hp.warmup_steps:
                return (step + 1) / hp.warmup_steps
            progress = min(1.0, (step - hp.warmup_steps) / max(1, hp.max_steps - hp.warmup_steps))
            return hp.min_lr_ratio + (1 - hp.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
