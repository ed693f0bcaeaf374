"""A training function of one's own, swept by capgeo's launcher (docs/sweeps.md, "A training function of your
own"): Ray Tune's function trainable, ``train(config)``, with capgeo's callbacks; nothing in it knows the launcher.

    capgeo sweep examples.sweep_function:train --grid lr=0.001,0.003 seed=0,1 --logdir runs/grid

The model and data are examples/own_model.py's (a + b mod 23), trained full-batch so that a run resumed from its
checkpoint sees the batches an unbroken run sees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader

from capgeo_callbacks import EvaluationSchedule, LinearProbeMonitor, PrecursorDetector, RankMeMonitor
from capgeo_callbacks.rules import default_rules
from examples.own_model import TinyLM, modular_addition


def train(config: dict[str, Any]) -> None:
    """One grid point: ``config`` holds the grid's settings (``lr``, ``seed``, optionally ``max_steps``) and the
    launcher's ``trial_dir`` (where everything is written) and ``resume_from`` (a checkpoint, or None)."""
    pl.seed_everything(config["seed"])
    trial_dir = Path(config["trial_dir"])
    training = DataLoader(modular_addition(1024, config["seed"]), batch_size=1024)
    validation = DataLoader(modular_addition(512, config["seed"] + 1, distinct=True), batch_size=512)
    trainer = pl.Trainer(max_steps=config.get("max_steps", 300), default_root_dir=trial_dir,
                         enable_progress_bar=False, callbacks=[
        EvaluationSchedule(points=32),
        RankMeMonitor(layers=["model.layers.*", "model.norm"], selector="last", num_rows=512),
        LinearProbeMonitor(layers="model.norm", every_n_evals=4),
        PrecursorDetector(monitor="val/acc", rules=default_rules(), overhead_budget="measure"),  # every point kept
        ModelCheckpoint(dirpath=trial_dir / "checkpoints", save_last=True,
                        save_on_train_epoch_end=False),  # last.ckpt after each evaluation
    ])
    trainer.fit(TinyLM(lr=config["lr"]), training, validation, ckpt_path=config["resume_from"])
