"""A user's ``transformers.Trainer`` run with ``report_to=["tensorboard"]`` and CapgeoTrainerCallback at its defaults
(as docs/quickstart.md prints it) on a tiny Hugging Face Llama under ``num_train_epochs``. Run from an empty folder
with capgeo installed (not the checkout); it fails unless the Trainer's TensorBoard folder holds RankMe of every
hidden state at every step its overhead budget measured, with the summary's values, and the summary is written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from task import Addition, llama
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from transformers import Trainer, TrainingArguments, set_seed

from capgeo_callbacks.integrations.hf import CapgeoTrainerCallback


def main() -> None:
    set_seed(0)
    val = Addition(256, seed=1, distinct=True)
    callback = CapgeoTrainerCallback({"input_ids": val.input_ids, "labels": val.labels})
    args = TrainingArguments(output_dir="trainer_run", report_to=["tensorboard"], num_train_epochs=2,
                             per_device_train_batch_size=64, learning_rate=3e-3, logging_steps=50,
                             save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True)
    Trainer(model=llama(), args=args, train_dataset=Addition(16384, seed=0), callbacks=[callback]).train()

    summary = json.loads(Path("trainer_run/capgeo_summary.json").read_text())
    (folder,) = Path("trainer_run/runs").iterdir()  # the Trainer's TensorBoard folder
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    rankme = {tag: points for tag, points in summary["series"].items() if tag.startswith("rankme/")}
    print(f"steps: {summary['steps']}, measured at {len(callback.steps)} steps, verdict: {summary['verdict']}, "
          f"acquisition step: {summary['acquisition_step']}")
    assert list(rankme) == ["rankme/embed", "rankme/layers.0", "rankme/layers.1+final_norm"], list(rankme)
    # at the default overhead budget RankMe is thinned to fit: measured at the steps the budget ran, which the summary
    # counts and explains, each of them a step the callback evaluated
    overhead = summary["overhead"]
    measured = overhead["work"]["rankme"]["runs"]
    assert measured == len(callback.steps) or overhead["said"], "RankMe thinned without a word on why"
    print(f"overhead budget {overhead['setting']}: RankMe at {measured} of {len(callback.steps)} measured steps")
    for tag, points in rankme.items():
        logged = [(event.step, event.value) for event in events.Scalars(f"train/{tag}")]
        steps = [step for step, _ in points]
        assert [step for step, _ in logged] == steps and len(steps) == measured > 10, tag
        assert set(steps) <= set(callback.steps), tag
        assert all(math.isclose(a, b, rel_tol=1e-6) for (_, a), (_, b) in zip(logged, points, strict=True)), tag
        print(f"TensorBoard train/{tag}: {len(logged)} steps, {logged[0][1]:.1f} -> {logged[-1][1]:.1f}")
    assert torch.isfinite(torch.tensor([v for _, v in summary["series"]["acc"]])).all()


if __name__ == "__main__":
    main()
