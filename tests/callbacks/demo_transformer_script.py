"""Lightning's own demo transformer watched by capgeo, as a new user first tries it: synthetic tokens instead of
WikiText-2, a validation step, RankMe on the encoder's layers and the precursor detector.

Run by tests/callbacks/test_scripts.py as a user's script would be run: from ``python -c`` and from standard input
(``python - LOG_DIR [--ildr-rule] < demo_transformer_script.py``), where ``__main__`` has no source file; with
``--ildr-rule`` the detector is asked for the ILDR rule, which these batches (one target per position, pooled rows)
cannot feed: a warning raised inside a hook. Imported by the same tests to fit in-process.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.demos.transformer import LightningTransformer
from lightning.pytorch.loggers import CSVLogger
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from capgeo_callbacks import PrecursorDetector, RankMeMonitor
from capgeo_callbacks.rules import ILDRRiseRule

VOCAB, LENGTH = 16, 8


def tokens(n: int, seed: int) -> TensorDataset:
    """``n`` random sequences: inputs and their next tokens."""
    ids = torch.randint(0, VOCAB, (n, LENGTH + 1), generator=torch.Generator().manual_seed(seed))
    return TensorDataset(ids[:, :-1], ids[:, 1:])


class DemoTransformer(LightningTransformer):
    """The demo on synthetic tokens, with a validation step (the demo has none)."""

    def __init__(self) -> None:
        super().__init__(vocab_size=VOCAB)

    def prepare_data(self) -> None:  # the demo downloads WikiText-2 here
        pass

    def train_dataloader(self) -> DataLoader:
        return DataLoader(tokens(64, 0), batch_size=16)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(tokens(32, 1), batch_size=16)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        inputs, target = batch
        output = self(inputs, target)
        self.log("val/loss", F.nll_loss(output, target.reshape(-1)))
        self.log("val/acc", (output.argmax(-1) == target.reshape(-1)).float().mean())


def fit(log_dir: str | Path, ildr_rule: bool = False, callbacks: Sequence[pl.Callback] = ()) -> pl.Trainer:
    """Four steps, validated every second one; RankMe of the encoder's layers on each sequence's mean row (and
    ``callbacks`` besides)."""
    pl.seed_everything(0)
    # every evaluation measured (a budget would thin RankMe on a loaded machine: a model this small trains in
    # milliseconds a step)
    rules = [ILDRRiseRule()] if ildr_rule else None
    detector = PrecursorDetector(rules=rules, overhead_budget="measure")
    trainer = pl.Trainer(max_steps=4, val_check_interval=2, num_sanity_val_steps=0, accelerator="cpu",
                         logger=CSVLogger(log_dir, name="demo"), enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[RankMeMonitor(layers=["model.transformer.encoder.layers.*"], selector="mean"),
                                    detector, *callbacks])
    trainer.fit(DemoTransformer())
    return trainer


if __name__ == "__main__":
    fit(sys.argv[1], ildr_rule="--ildr-rule" in sys.argv)
