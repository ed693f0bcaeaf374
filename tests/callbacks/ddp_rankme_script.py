"""Run by tests/callbacks/test_ddp.py: RankMeMonitor + PrecursorDetector under Lightning DDP (gloo, CPU).

Lightning's DDP launcher starts this script again for rank 1. Rank 0 writes what the test checks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.loggers import TensorBoardLogger

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from capgeo_callbacks import PrecursorDetector, RankMeMonitor  # noqa: E402
from tests.callbacks.conftest import ForeignEncoder, loaders, reference_rankme  # noqa: E402


def main(out: Path) -> None:
    seed_everything(0, verbose=False)
    model = ForeignEncoder()
    train, val = loaders()
    monitor = RankMeMonitor(layers="encoder.layers.*", selector="mean", num_rows=256)
    detector = PrecursorDetector(monitor="val_acc", logprob_monitor=None)
    trainer = Trainer(
        strategy="ddp", accelerator="cpu", devices=2, max_steps=16, val_check_interval=8,
        logger=TensorBoardLogger(str(out), name="", version=""), callbacks=[monitor, detector],
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        num_sanity_val_steps=0, use_distributed_sampler=True,
    )
    trainer.fit(model, train, val)
    if trainer.global_rank != 0:
        return
    # independent RankMe of all 256 validation rows at the final weights, in one process
    rows = []
    handle = model.encoder.layers[1].register_forward_hook(lambda m, a, o: rows.append(o.mean(dim=1)))
    model.eval()
    with torch.no_grad():
        for x, _ in val:
            model(x)
    handle.remove()
    reference = reference_rankme(torch.cat(rows).numpy())
    (out / "result.json").write_text(json.dumps({
        "series": monitor.series, "rows_used": monitor.rows_used, "reference_last_layer": reference,
        "world_size": trainer.world_size,
    }))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
