"""A user's Lightning run with capgeo's callbacks at their defaults, as docs/quickstart.md prints them, on a tiny
Hugging Face Llama under ``max_epochs``. Run from an empty folder with capgeo installed (not the checkout); it fails
unless the run gives RankMe of every block, probe values, alerts or a word on why none, a forecast before
acquisition and a summary."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch import Trainer
from task import Addition, accuracy, llama

from capgeo_callbacks import EvaluationSchedule, LinearProbeMonitor, PrecursorDetector, RankMeMonitor, StepProgressBar


class LlamaModule(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = llama()

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.model(**batch).loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val/acc", accuracy(self.model, batch))
        self.log("val/loss", self.model(**batch).loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")  # capgeo says what it picked
    pl.seed_everything(0)
    train = torch.utils.data.DataLoader(Addition(16384, seed=0), batch_size=64, shuffle=True)
    val = torch.utils.data.DataLoader(Addition(256, seed=1, distinct=True), batch_size=256)
    alerts: list = []
    trainer = Trainer(max_epochs=2, default_root_dir="lightning_runs", enable_checkpointing=False, callbacks=[
        EvaluationSchedule(), RankMeMonitor(), LinearProbeMonitor(), PrecursorDetector(on_alert=alerts.append),
        StepProgressBar()])
    trainer.fit(LlamaModule(), train, val)

    summary = json.loads((Path(trainer.log_dir) / "capgeo_summary.json").read_text())
    series, layers = summary["series"], list(summary["layers"])
    print(f"steps: {summary['steps']}, evaluations: {len(series['acc'])}, verdict: {summary['verdict']}, "
          f"acquisition step: {summary['acquisition_step']}")
    blocks = ["layers.0", "layers.1", "norm"]  # found in LlamaForCausalLM (model.model.layers.N, model.model.norm)
    assert layers == blocks, f"RankMe per block: {layers}"
    # at the default overhead budget RankMe is thinned to fit (a run this short cannot hold 3%): every block is
    # measured at the evaluations the budget ran, which the summary counts and explains
    overhead = summary["overhead"]
    measured = overhead["work"]["rankme"]["runs"]
    assert measured == len(series["acc"]) or overhead["said"], "RankMe thinned without a word on why"
    print(f"overhead budget {overhead['setting']}: RankMe at {measured} of {len(series['acc'])} evaluations")
    for name in blocks:
        assert len(series[f"rankme/{name}"]) == measured > 10, (name, len(series[f"rankme/{name}"]), measured)
        print(f"RankMe {name}: {series[f'rankme/{name}'][0][1]:.1f} -> {series[f'rankme/{name}'][-1][1]:.1f}")
    probes = {tag: points for tag, points in series.items() if tag.startswith("probe_acc/")}
    assert probes and all(points for points in probes.values()), f"probe values: {sorted(probes)}"
    print("probes:", ", ".join(f"{tag} {points[-1][1]:.2f}" for tag, points in probes.items()))
    # alerts, or a word on why none: the summary says which rules ran and which were left out for lack of inputs
    assert alerts or summary["rules"], "neither alerts nor a word"
    print("alerts:", [alert.message("val/acc") for alert in alerts] or "none", "| rules:", sorted(summary["rules"]))
    acquired = summary["acquisition_step"]
    made = [(rule, f) for rule, forecasts in summary["forecasts"].items() for f in forecasts
            if acquired is None or f["step"] < acquired]
    assert made, f"no forecast before acquisition (step {acquired})"
    rule, first = made[0]
    print(f"first forecast ({rule}) at step {first['step']}: step {first['predicted']:.0f}")


if __name__ == "__main__":
    main()
