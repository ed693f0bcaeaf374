"""What capgeo does today on each gallery example, for docs/your-model-gaps.md.

``python -m tests.examples.gaps_report [FOLDER]``.

For each example: the run as the example attaches capgeo (every message capgeo printed, its alerts, its forecasts
before acquisition), then the same model and data with today's explicit escape hatches (``labels_fn`` and a
callable row selector for the probe), and the forecasters replayed offline on the run's series: what issue 28's
xfailed assertions need is reachable on these runs.
"""

from __future__ import annotations

import math
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch import Trainer
from torch.utils.data import DataLoader

from capgeo_callbacks import EvaluationSchedule, LinearProbeMonitor, PrecursorDetector, RunView
from capgeo_callbacks.rules import CurveForecaster, ThresholdForecaster, default_rules, replay
from tests.examples.helpers import ExampleRun, load_example, run_example

CAPGEO = ("capgeo", "Monitor", "PrecursorDetector", "CapgeoTrainerCallback", "EvaluationSchedule")


def report(name: str, run: ExampleRun) -> None:
    acquired = run.acquisition_step
    print(f"\n## {name}: acquisition step {acquired}, {len(run.series('acc'))} evaluations, "
          f"{run.summary['steps']} steps, {run.cpu_seconds:.1f} CPU s")
    print("series:", ", ".join(sorted(run.summary["series"])))
    said = Counter(message.splitlines()[0][:220] for message in run.messages if any(w in message for w in CAPGEO))
    for message, count in said.items():
        print(f"  said {count}x: {message}")
    for alert in run.summary["alerts"]:
        print(f"  alert {alert['rule']} at step {alert['step']} (layer {alert['layer']})")
    for rule, made in run.summary.get("forecasts", {}).items():
        before = [f for f in made if acquired is not None and f["step"] < acquired]
        print(f"  forecasts by {rule}: {len(made)}, {len(before)} before acquisition, first at step "
              f"{made[0]['step'] if made else '-'}")


def replay_forecasters(run: ExampleRun, chance: float) -> None:
    """Offline, on the run's series: which forecaster would have met issue 28's condition (a forecast at or before
    75% of the time to acquisition with step < low <= predicted <= high), given what."""
    acquired = run.acquisition_step
    series = dict(run.summary["series"])
    if "val/loss" in series:
        series["val/logprob"] = [[step, -value] for step, value in series["val/loss"]]
    given = {"nothing": {}, "chance": {"chance": {"exact": chance, "token_acc": chance, "logprob": math.log(chance),
                                                   "logprob_sd": 0.0, "questions": 512, "tokens": 512}}}
    for what, info in given.items():
        view = RunView.from_points(series["acc"], series, info)
        for rule in (CurveForecaster(), ThresholdForecaster("logprob", window=1.0)):
            _, made = replay(rule, view)
            ok = [f for f in made if acquired and f.step <= 0.75 * acquired and f.predicted is not None
                  and math.isfinite(f.predicted) and f.low is not None and f.step < f.low <= f.predicted
                  and (f.high is None or f.predicted <= f.high)]
            first = ok[0] if ok else None
            shown = (f"first at step {first.step}: {first.predicted:.0f} [{first.low:.0f}, {first.high:g}]"
                     if first else "none")
            print(f"  replayed {rule.name} given {what}: {len(ok)} forecasts meeting the condition; {shown}")


def with_escape_hatches(name: str, build: Callable[[], tuple[pl.LightningModule, DataLoader, DataLoader]],
                        probe_layer: str, labels: Callable[[Any], Any], rows: Callable[[Any, Any], Any],
                        max_steps: int, root: Path) -> None:
    """The example's model and data, its probe given ``labels_fn`` and a callable row selector (today's API)."""
    def main() -> Path:
        pl.seed_everything(0)
        model, train, val = build()
        trainer = Trainer(max_steps=max_steps, default_root_dir=root / name, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False, callbacks=[
                              EvaluationSchedule(points=96),
                              LinearProbeMonitor(layers=probe_layer, selector=rows, labels_fn=labels),
                              PrecursorDetector(monitor="val/acc", rules=default_rules())])
        trainer.fit(model, train, val)
        return Path(trainer.log_dir)

    run = run_example(main)
    probe = run.series(f"probe_acc/{probe_layer.split('.')[-1]}") or next(
        (run.series(tag) for tag in run.summary["series"] if tag.startswith("probe_acc/")), [])
    crossing = [a["step"] for a in run.summary["alerts"] if a["rule"] == "probe-crossing"]
    print(f"  with labels_fn: probe {probe_layer} {probe[0][1]:.2f} at step 0, {probe[-1][1]:.2f} at the end; "
          f"probe-crossing alert at {crossing or 'none'}; acquisition {run.acquisition_step}; "
          f"skipped messages: {sum('skipped' in m for m in run.messages)}")


def main(root: Path) -> None:
    own = load_example("own_model")
    run = run_example(own.main, root=root)
    report("own_model (a)", run)
    replay_forecasters(run, 1 / 23)
    with_escape_hatches("own_model", lambda: (own.TinyLM(), *own.data(0)), "model.norm", lambda b: b[1][:, -1],
                        lambda hidden, batch: hidden[:, -1], 600, root)

    demo = load_example("lightning_demo_transformer")
    run = run_example(demo.main, root=root)
    report("lightning_demo_transformer (b)", run)
    replay_forecasters(run, 1 / 7)
    with_escape_hatches("demo", lambda: (demo.SumOfDigits(), DataLoader(demo.digit_sums(64 * 1024, 0), batch_size=64,
                        shuffle=True), DataLoader(demo.digit_sums(512, 1), batch_size=256)),
                        "model.transformer.decoder.norm", lambda b: b[1], "mean", 400, root)

    hf = load_example("hugging_face_gpt2")
    for framework in ("lightning", "transformers"):
        run = run_example(hf.main, framework=framework, root=root / framework)
        report(f"hugging_face_gpt2 (c), {framework}", run)
        replay_forecasters(run, 1 / 16)
    with_escape_hatches("gpt2", lambda: (hf.GPT2Module(0), DataLoader(hf.TokenAtPosition(64 * 1024, 0), batch_size=64,
                        shuffle=True), DataLoader(hf.TokenAtPosition(512, 1), batch_size=256)),
                        "model.transformer.ln_f", lambda b: b["labels"][:, -1], lambda hidden, batch: hidden[:, -2],
                        300, root)

    vision = load_example("vision_encoder")
    run = run_example(vision.main, root=root)
    report("vision_encoder (d)", run)
    replay_forecasters(run, 1 / 5)
    with_escape_hatches("vision", lambda: (vision.TinyViT(), DataLoader(vision.two_glyphs(32 * 1024, 0), batch_size=64,
                        shuffle=True), DataLoader(vision.two_glyphs(512, 1), batch_size=256)),
                        "norm", lambda b: b[1], "mean", 300, root)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(folder))
