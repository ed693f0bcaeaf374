"""The LightningModule that trains the new task families, around the gallery's small decoder (``examples/decoder.py``).

Module names follow Hugging Face Llama models (``model.embed_tokens``, ``model.layers.N``, ``model.norm``,
``lm_head``), so the README's "With Lightning" callbacks watch it as printed. Batches are tuples
``(inputs, targets)``: the next token at each position, -100 where there is nothing to predict (the question).
"""

from __future__ import annotations

import math

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn

from examples.decoder import Decoder

IGNORE = -100  # F.cross_entropy's ignore_index: a position with no target


class AnswerLM(pl.LightningModule):
    """Next-token training on the answer; logs ``val/acc`` (every answer token right), ``val/token_acc`` and
    ``val/loss`` (per answer token). AdamW, the learning rate warmed up linearly over ``warmup`` steps, then
    constant, or (``decay_steps``) decayed along a cosine to 0 at that step."""

    def __init__(self, vocab: int, length: int, dim: int = 32, layers: int = 2, heads: int = 4, lr: float = 2e-3,
                 warmup: int = 20, decay_steps: int | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = Decoder(vocab, length, dim, layers, heads)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.model(inputs))  # (B, T, vocab)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        loss = F.cross_entropy(self(inputs).flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        inputs, targets = batch
        logits = self(inputs)
        answer = targets != IGNORE
        right = logits.argmax(dim=-1) == targets
        self.log("val/acc", (right | ~answer).all(dim=1).float().mean())
        self.log("val/token_acc", right[answer].float().mean())
        self.log("val/loss", F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE))

    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        warmup, decay = self.hparams.warmup, self.hparams.decay_steps

        def factor(step: int) -> float:
            cosine = 0.5 * (1 + math.cos(math.pi * min(step, decay) / decay)) if decay else 1.0
            return min(1.0, (step + 1) / warmup) * cosine

        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
