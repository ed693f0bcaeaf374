"""A Hugging Face causal LM (GPT-2, built from a config: nothing downloaded), trained two ways, watched by capgeo.

The task: eight tokens, ``=``, a position k, and the answer is the token at position k (``x_1 .. x_8 = k x_k``),
in Hugging Face's batch convention: dicts of ``input_ids`` and ``labels`` (-100 where there is nothing to predict;
the model shifts them). The same model is trained inside a LightningModule (capgeo's Lightning callbacks on
``model.transformer.h.*`` and ``ln_f``) and by ``transformers.Trainer``
(``capgeo_callbacks.integrations.hf.CapgeoTrainerCallback`` on a fixed set of validation rows, which hold their
``labels``).

What it shows, in both (seed 0; tests/examples/test_hugging_face_gpt2.py asserts each): accuracy near chance
(1/16) for the first 50 steps, then acquired (>= 0.5 held; step 78) and learned (>= 0.9); RankMe of every block at
every evaluation, the rankme-recovery alert before acquisition (RankMe collapses and recovers; step 33); a linear
probe of the final norm read off the ``labels`` (the label of position t being ``labels[t + 1]``: 0.16 at step 0,
1.00 at the end; measured at every 4th evaluation, it crosses halfway at step 82 under both, after acquisition); and
a forecast of the acquisition step made at 75% of the time to it (Lightning: step 58, 153 [93, 2006];
transformers: step 54, 106 [80, 267]): too late, and its interval misses 78 (the rise has just begun).
Under ``transformers.Trainer`` the callback reads accuracy, loss and probe labels off the validation rows' own
``labels``.
Under both every evaluation is measured (``overhead_budget="measure"``: timed, nothing thinned): a model this small
trains in milliseconds a step, where the default 3% budget would measure RankMe at fewer evaluations (and say so
once). Both take the measures at the registry's cadences (the probes at every 4th evaluation).

Run: ``python examples/hugging_face_gpt2.py`` (both trainings).
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch import Trainer
from torch import nn
from torch.utils.data import DataLoader, Dataset
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments
from transformers import Trainer as HFTrainer

from capgeo_callbacks import (
    EvaluationSchedule,
    LinearProbeMonitor,
    PrecursorDetector,
    RankMeMonitor,
    StepProgressBar,
)
from capgeo_callbacks.integrations.hf import CapgeoTrainerCallback
from capgeo_callbacks.rules import default_rules

VALUES, LENGTH = 16, 8  # tokens 0..15 are values, 16 is "=", 17.. are the positions 1..8
EQUALS, VOCAB = VALUES, VALUES + 1 + LENGTH


class TokenAtPosition(Dataset):
    """``x_1 .. x_8 = k x_k``; ``labels`` is -100 but at the answer."""

    def __init__(self, examples: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        values = torch.randint(0, VALUES, (examples, LENGTH), generator=generator)
        position = torch.randint(0, LENGTH, (examples,), generator=generator)
        answer = values[torch.arange(examples), position]
        self.input_ids = torch.cat([values, torch.full((examples, 1), EQUALS), (EQUALS + 1 + position)[:, None],
                                    answer[:, None]], dim=1)  # (N, 11)
        self.labels = torch.full_like(self.input_ids, -100)
        self.labels[:, -1] = answer

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids[index], "labels": self.labels[index]}

    def rows(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "labels": self.labels}


def gpt2(seed: int) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=VOCAB, n_positions=LENGTH + 3, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config)


def answer_accuracy(model: nn.Module, batch: dict[str, torch.Tensor]) -> float:
    """Share of rows whose every labelled token is the argmax (the logits at t predict ``labels[t + 1]``)."""
    predicted = model(input_ids=batch["input_ids"]).logits[:, :-1].argmax(dim=-1)
    labels = batch["labels"][:, 1:]
    return float(((predicted == labels) | (labels == -100)).all(dim=1).float().mean())


class GPT2Module(pl.LightningModule):
    def __init__(self, seed: int = 0, lr: float = 2e-3, warmup: int = 20) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = gpt2(seed)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.model(**batch).loss
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val/acc", answer_accuracy(self.model, batch))
        self.log("val/loss", self.model(**batch).loss)

    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / self.hparams.warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": warmup, "interval": "step"}}


def main(framework: str = "lightning", max_steps: int = 300, points: int = 96, seed: int = 0,
         root: str | Path = "runs/examples") -> Path:
    """Train with ``framework`` ("lightning" or "transformers") and return the folder of capgeo_summary.json."""
    train, val = TokenAtPosition(64 * 1024, seed), TokenAtPosition(512, seed + 1)
    if framework == "lightning":
        pl.seed_everything(seed)
        trainer = Trainer(max_steps=max_steps, default_root_dir=root, enable_checkpointing=False, callbacks=[
            EvaluationSchedule(points=points),
            RankMeMonitor(layers=["model.transformer.h.*", "model.transformer.ln_f"], selector="last", num_rows=512),
            LinearProbeMonitor(layers="model.transformer.ln_f", every_n_evals=4),
            PrecursorDetector(monitor="val/acc", rules=default_rules(), on_alert=print,
                              overhead_budget="measure"),  # every evaluation measured, capgeo's share still said
            StepProgressBar(),
        ])
        trainer.fit(GPT2Module(seed), DataLoader(train, batch_size=64, shuffle=True), DataLoader(val, batch_size=256))
        return Path(trainer.log_dir)
    if framework != "transformers":
        raise ValueError(f"framework must be 'lightning' or 'transformers', got {framework!r}")
    output_dir = Path(root) / "transformers"
    args = TrainingArguments(output_dir=str(output_dir), max_steps=max_steps, per_device_train_batch_size=64,
                             learning_rate=2e-3, lr_scheduler_type="constant_with_warmup", warmup_steps=20,
                             weight_decay=0.0, seed=seed, use_cpu=True, report_to=[], save_strategy="no",
                             logging_steps=50, disable_tqdm=True)
    capgeo = CapgeoTrainerCallback(val.rows(), points=points, rules=default_rules(), on_alert=print,
                                   overhead_budget="measure")  # as under Lightning: every evaluation measured
    capgeo.attach(HFTrainer(model=gpt2(seed), args=args, train_dataset=train)).train()
    return output_dir


if __name__ == "__main__":
    for framework in ("lightning", "transformers"):
        print(f"{framework}: {main(framework) / 'capgeo_summary.json'}")
