"""The LightningModule that trains a capgeo transformer on an algorithmic task.

Logged keys:
    ``train/loss``: answer-masked cross-entropy of the training batch.
    ``val/loss``: answer-masked cross-entropy on the validation set (per answer token).
    ``val/acc``: exact match of the whole answer (every answer token right under teacher-forced argmax).
    ``val/token_acc``: per-token accuracy over answer tokens.
    ``val/logprob``: mean log-probability of the correct answer tokens (``-val/loss``; logged under its own
    name because detection reads it as "log-prob emergence").
(``test/...`` likewise.) The loss and the scores are the library's (:mod:`capgeo_callbacks.capture.batches`, a public
module), so offline analysis scores revisions the same way. Validation metrics are torchmetrics ``MeanMetric`` s:
each example (or answer token) counts once, across batches of any size and across DDP ranks.
"""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric

from capgeo_callbacks.capture.batches import answer_cross_entropy, answer_scores
from models.sizes import build_model

Batch = dict[str, Tensor]
LR_SCHEDULES = ("cosine", "constant")


def answer_loss(logits: Tensor, targets: Tensor, answer_mask: Tensor) -> Tensor:
    """Mean cross-entropy over answer tokens (:func:`capgeo_callbacks.capture.batches.answer_cross_entropy`)."""
    return answer_cross_entropy(logits, {"targets": targets, "answer_mask": answer_mask})


def answer_metrics(logits: Tensor, targets: Tensor, answer_mask: Tensor) -> dict[str, Tensor]:
    """One batch's exact-match accuracy, mean answer-token log-prob and loss
    (:func:`capgeo_callbacks.capture.batches.answer_scores`)."""
    scores = answer_scores(logits, targets, answer_mask)
    logprob = scores["token_logprob"].mean() if scores["token_logprob"].numel() else torch.zeros(())
    return {"acc": scores["exact"].mean(), "logprob": logprob, "loss": -logprob}


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
        lr_schedule: after the warm-up, ``cosine`` (decay to ``min_lr_ratio * lr`` at ``max_steps``) or
            ``constant`` (``lr`` to the end).
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
        lr_schedule: str = "cosine",
    ) -> None:
        if lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"unknown lr_schedule {lr_schedule!r}; valid: {', '.join(LR_SCHEDULES)}")
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be at least 0, got {warmup_steps}")
        super().__init__()
        self.save_hyperparameters()
        self.model = build_model(size, vocab_size, max_seq_len, dropout=dropout)
        self.metrics = nn.ModuleDict({f"{split}_{name}": MeanMetric() for split in ("val", "test")
                                      for name in ("acc", "token_acc", "logprob", "loss")})

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.model(input_ids)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        logits = self(batch["input_ids"])
        loss = answer_cross_entropy(logits, batch)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def _evaluate(self, batch: Batch, split: str) -> None:
        scores = answer_scores(self(batch["input_ids"]), batch["targets"], batch["answer_mask"])
        updates = {"acc": scores["exact"], "token_acc": scores["token_right"], "logprob": scores["token_logprob"],
                   "loss": -scores["token_logprob"]}
        for name, values in updates.items():
            metric = self.metrics[f"{split}_{name}"]
            metric.update(values)
            # the metric object: Lightning computes it over the whole set (all ranks) at the epoch's end
            self.log(f"{split}/{name}", metric, on_step=False, on_epoch=True, prog_bar=name == "acc")

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
            if hp.get("lr_schedule", "cosine") == "constant":
                return 1.0
            progress = min(1.0, (step - hp.warmup_steps) / max(1, hp.max_steps - hp.warmup_steps))
            return hp.min_lr_ratio + (1 - hp.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
