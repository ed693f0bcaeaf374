"""Your own causal LM and task, with capgeo attached as the README's "On your own model" prints it, every point kept.

A small decoder-only transformer named like Hugging Face Llama models (``model.layers.N``, ``model.norm``; the
gallery's ``examples/decoder.py``) learns ``a b = (a + b) mod 23`` from tuple batches ``(inputs, targets)``: the next
token at each position, -100 (ignored) but at the answer. It logs ``val/acc`` and ``val/loss``; nothing in it is
written for capgeo.

What it shows (seed 0; tests/examples/test_own_model.py asserts each): accuracy at chance (1/23) for 150-odd
steps, then acquired (>= 0.5 held; step 273) and learned (>= 0.9); RankMe of every layer at every evaluation; a
linear probe on ``model.norm`` with labels read off the tuple batches (0.00 at step 0, 0.91 at the end); every
rule fed (rankme-recovery sees no collapse here, and the probe-crossing warning comes at step 335, after
acquisition: the probe reads what the head reads); ``acc-trend``'s forecast once accuracy leaves chance, first at
step 179: step 294 [236, 647], which holds 273; ``capgeo_summary.json``; the progress bar ``step k/600`` with
accuracy, RankMe and the forecast. Run: ``python -m examples.own_model`` (a minute on one CPU thread).
Every evaluation is measured (``overhead_budget="measure"``: timed, nothing thinned): a model this small trains in
milliseconds a step, where the default 3% budget would measure RankMe at fewer evaluations (and say so once).
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch import Trainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from capgeo_callbacks import (
    EvaluationSchedule,
    LinearProbeMonitor,
    PrecursorDetector,
    RankMeMonitor,
    StepProgressBar,
)
from capgeo_callbacks.rules import default_rules
from examples.decoder import Decoder  # a Llama-like decoder (model.layers.N, model.norm), as one's own model

P = 23  # the modulus; tokens 0..P-1 are numbers, P is "="


def modular_addition(examples: int, seed: int, distinct: bool = False) -> TensorDataset:
    """Questions ``a b =``, targets -100 but at ``=`` (a + b mod P); ``distinct``: no question twice."""
    generator = torch.Generator().manual_seed(seed)
    if distinct:
        pairs = torch.randperm(P * P, generator=generator)[:examples]
        a, b = pairs // P, pairs % P
    else:
        a, b = torch.randint(0, P, (2, examples), generator=generator)
    inputs = torch.stack([a, b, torch.full_like(a, P)], dim=1)  # (N, 3)
    targets = torch.full_like(inputs, -100)
    targets[:, -1] = (a + b) % P
    return TensorDataset(inputs, targets)


class TinyLM(pl.LightningModule):
    def __init__(self, dim: int = 32, layers: int = 2, heads: int = 4, lr: float = 2e-3, warmup: int = 20) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = Decoder(P + 1, 3, dim, layers, heads)
        self.lm_head = nn.Linear(dim, P + 1, bias=False)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.model(inputs))  # (B, T, vocab)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        loss = F.cross_entropy(self(inputs).flatten(0, 1), targets.flatten())  # ignore_index=-100
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        inputs, targets = batch
        logits = self(inputs)
        right = (logits.argmax(-1) == targets) | (targets == -100)
        self.log("val/acc", right.all(dim=1).float().mean())
        self.log("val/loss", F.cross_entropy(logits.flatten(0, 1), targets.flatten()))

    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / self.hparams.warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": warmup, "interval": "step"}}


def data(seed: int = 0, batch_size: int = 64) -> tuple[DataLoader, DataLoader]:
    """Training and validation loaders (512 validation questions, in a fixed order)."""
    train = DataLoader(modular_addition(64 * 1024, seed), batch_size=batch_size, shuffle=True)
    return train, DataLoader(modular_addition(512, seed + 1, distinct=True), batch_size=256)


def main(max_steps: int = 600, points: int = 128, seed: int = 0, root: str | Path = "runs/examples") -> Path:
    """Train and return the run's folder (``capgeo_summary.json`` is in it)."""
    pl.seed_everything(seed)
    model = TinyLM()
    train, val = data(seed)
    trainer = Trainer(max_steps=max_steps, default_root_dir=root, enable_checkpointing=False, callbacks=[
        EvaluationSchedule(points=points),
        RankMeMonitor(layers=["model.layers.*", "model.norm"], selector="last", num_rows=512),
        LinearProbeMonitor(layers="model.norm", every_n_evals=4),
        PrecursorDetector(monitor="val/acc", rules=default_rules(), on_alert=print,
                          overhead_budget="measure"),  # every evaluation measured, capgeo's share still said
        StepProgressBar(),
    ])
    trainer.fit(model, train, val)
    return Path(trainer.log_dir)


if __name__ == "__main__":
    print(f"summary: {main() / 'capgeo_summary.json'}")
