"""Run by tests/callbacks/test_compatibility.py: every capgeo callback under Lightning DDP on CPU (gloo, 2
processes), with TensorBoard and CSV loggers; rank zero writes ``ok`` with the final step."""

from __future__ import annotations

import sys
from pathlib import Path

from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from torch.utils.data import DataLoader

from tests.callbacks.test_compatibility import DemoLM, detector_of, every_callback, tokens

if __name__ == "__main__":
    root = Path(sys.argv[1])
    seed_everything(0, verbose=False)
    trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=8, val_check_interval=4,
                      num_sanity_val_steps=0, logger=[TensorBoardLogger(root, name="tb"), CSVLogger(root, name="csv")],
                      callbacks=every_callback(schedule=True), default_root_dir=root, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(DemoLM(), DataLoader(tokens(64, 0), batch_size=8), DataLoader(tokens(64, 1), batch_size=32))
    if trainer.is_global_zero:
        assert detector_of(trainer).summary["steps"] == 8
        (root / "ok").write_text(str(trainer.global_step))
