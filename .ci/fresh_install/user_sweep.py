"""A user's training function swept by ``capgeo sweep`` from the installed wheel (docs/sweeps.md): Ray Tune's function
trainable, ``train(config)``, the tiny Llama of task.py with capgeo's callbacks, everything written under the trial's
folder. Nothing in it knows the launcher.

    capgeo sweep user_sweep:train --grid lr=0.003,0.01 --logdir runs/grid --jobs 2 --threads 1
    python user_sweep.py runs/grid 2      # fails unless both trials ran to their end, each with its summary
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from task import Addition, accuracy, llama

from capgeo_callbacks import EvaluationSchedule, PrecursorDetector, RankMeMonitor

STEPS = 24


class LlamaModule(pl.LightningModule):
    def __init__(self, lr: float) -> None:
        super().__init__()
        self.model, self.lr = llama(), lr

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.model(**batch).loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val/acc", accuracy(self.model, batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


def train(config: dict[str, Any]) -> None:
    """One grid point: ``config["lr"]``, and the launcher's ``trial_dir`` and ``resume_from``."""
    pl.seed_everything(0)
    training = torch.utils.data.DataLoader(Addition(2048, seed=0), batch_size=64, shuffle=True)
    validation = torch.utils.data.DataLoader(Addition(256, seed=1, distinct=True), batch_size=256)
    trainer = pl.Trainer(max_steps=STEPS, default_root_dir=config["trial_dir"], enable_progress_bar=False,
                         enable_checkpointing=False,
                         callbacks=[EvaluationSchedule(points=6), RankMeMonitor(), PrecursorDetector()])
    trainer.fit(LlamaModule(config["lr"]), training, validation, ckpt_path=config["resume_from"])


def check(logdir: Path, trials: int) -> None:
    """Each trial's folder holds the launcher's record of a returned call and the run's summary."""
    folders = sorted(path.parent for path in logdir.glob("*/capgeo_trial.json"))
    assert len(folders) == trials, f"trial folders: {folders}"
    for folder in folders:
        record = json.loads((folder / "capgeo_trial.json").read_text())
        assert record["returned"] and record["function"] == "user_sweep:train", record
        [summary_path] = folder.rglob("capgeo_summary.json")
        summary = json.loads(summary_path.read_text())
        assert summary["steps"] == STEPS and summary["series"]["rankme/layers.0"], sorted(summary["series"])
        print(f"{folder.name}: {summary['steps']} steps, {len(summary['series']['acc'])} evaluations, "
              f"threads {record['threads']}")


if __name__ == "__main__":
    check(Path(sys.argv[1]), int(sys.argv[2]))
