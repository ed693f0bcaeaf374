"""Run by tests/callbacks/test_ddp.py: RankMe, linear probes and the precursor detector under Lightning DDP
(gloo, CPU, 2 processes).

Lightning's DDP launcher starts this script again for rank 1. Each rank writes ``rank_<r>.json`` with what
it measured and what it warned; rank zero also records, at every evaluation, the single-process values of
the same rows at the same weights (RankMe from numpy's SVD, the probe from the pure function).
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.loggers import TensorBoardLogger

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from capgeo_callbacks import (  # noqa: E402
    DetectionSettings,
    LinearProbeMonitor,
    MeasureCallback,
    PrecursorDetector,
    RankMeMonitor,
)
from capgeo_callbacks.measures.ildr import ildr  # noqa: E402
from capgeo_callbacks.measures.probes import distinct_split, linear_probe_accuracy  # noqa: E402
from capgeo_callbacks.rules import RankMeRecoveryRule  # noqa: E402
from tests.callbacks.conftest import ForeignEncoder, loaders, reference_rankme  # noqa: E402

INTERVAL = 8  # 512 training examples, batches of 32 on each of 2 ranks: one epoch, one validation
# a scripted RankMe that collapses (step 48) and recovers (confirmed at step 72) while the scripted
# accuracy stays 0: one layer alert and one run alert
SCRIPTED = [20.0, 30.0, 40.0, 30.0, 15.0, 8.0, 9.0, 14.0, 20.0]
NUM_ROWS = 300  # more than the 256 validation rows: a "fewer rows than asked" warning, once


class ScriptedMeasure(MeasureCallback):
    """A measure whose values follow a script, with a scripted accuracy the detector monitors."""

    tags = ["rankme/scripted"]

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.record(trainer, trainer.global_step, {"rankme/scripted": SCRIPTED[self.evaluations]})
        pl_module.log("scripted_acc", 0.0, on_epoch=True, sync_dist=True)
        self.evaluations += 1


class SingleProcessReference(pl.Callback):
    """On rank zero, the values of one process on the same rows (rank 0's validation rows, then rank 1's)."""

    def __init__(self, layers: int) -> None:
        self.layers = layers
        self.values: dict[str, list[list[float]]] = {}

    def on_validation_end(self, trainer: Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.global_rank != 0:
            return
        x, y = loaders()[1].dataset.tensors
        order = torch.cat([torch.arange(0, len(x), 2), torch.arange(1, len(x), 2)])  # DistributedSampler's split
        outputs: list[torch.Tensor] = []
        handles = [layer.register_forward_hook(lambda m, a, out: outputs.append(out.mean(dim=1).detach()))
                   for layer in pl_module.encoder.layers]
        try:
            pl_module(x[order])
        finally:
            for handle in handles:
                handle.remove()
        labels = y[order]
        step = trainer.global_step
        for i, rows in enumerate(outputs):
            self.values.setdefault(f"rankme/layers.{i}", []).append([step, reference_rankme(rows.numpy())])
            self.values.setdefault(f"ildr/layers.{i}", []).append([step, ildr(rows, labels)])
            fit = distinct_split(rows)  # the halves share no input (the validation set repeats some)
            accuracy = linear_probe_accuracy(rows[fit], labels[fit], rows[~fit], labels[~fit], ridge=1e-3)
            self.values.setdefault(f"probe_acc/layers.{i}", []).append([step, accuracy])


class CountRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def main(out: Path) -> None:
    seed_everything(0, verbose=False)
    model = ForeignEncoder()
    train, val = loaders()
    rankme = RankMeMonitor(layers="encoder.layers.*", selector="mean", num_rows=NUM_ROWS)
    probes = LinearProbeMonitor(layers="encoder.layers.*", selector="mean", labels_fn=lambda batch: batch[1],
                                num_rows=NUM_ROWS)
    settings = DetectionSettings(smoothing=1)  # the study's rule alone: the scripted series are its story
    detector = PrecursorDetector(monitor="scripted_acc", logprob_monitor=None, settings=settings,
                                 rules=[RankMeRecoveryRule(settings)], overhead_budget=None)
    reference = SingleProcessReference(layers=2)
    trainer = Trainer(
        strategy="ddp", accelerator="cpu", devices=2, max_steps=INTERVAL * len(SCRIPTED),
        val_check_interval=INTERVAL, logger=TensorBoardLogger(str(out), name="", version=""),
        callbacks=[rankme, probes, ScriptedMeasure(), detector, reference], enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
        use_distributed_sampler=True,
    )
    records = CountRecords()
    logging.getLogger("capgeo").addHandler(records)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, train, val)
    capgeo_warnings = [str(w.message) for w in caught if "Monitor:" in str(w.message)]
    (out / f"rank_{trainer.global_rank}.json").write_text(json.dumps({
        "world_size": trainer.world_size,
        "series": {**rankme.series, **probes.series},
        "rankme_rows": rankme.rows,
        "probe_rows": probes.rows,
        "alerts": [[a.kind, a.layer, a.step] for a in detector.alerts],
        "verdict": detector.summary.get("verdict"),
        "log_warnings": records.messages,
        "capgeo_warnings": capgeo_warnings,
        "reference": reference.values,
    }))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
