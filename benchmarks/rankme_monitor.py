"""`RankMeMonitor` per evaluation vs its mathematics alone on the same rows and layers.

    OMP_NUM_THREADS=1 python -m benchmarks.rankme_monitor --task sort --difficulty hard --repeats 15 --threads 1

The real setting of ``train.py``: the smallest capgeo model (``CapabilityModule``, size ``xs``) on the
task's datamodule with train.py's validation settings (``train.make_datamodule``: 512 validation examples in one
batch of 1024), and the ``RankMeMonitor`` that train.py builds (``train.MEASURE_OPTIONS["rankme"]``:
``model.blocks.*`` and ``model.norm_f``, the ``first_answer`` rows, 512 of them). Times, interleaved and
``repeats`` times each after a warm-up:

- ``plain``: ``Trainer.validate`` without callbacks;
- ``monitor``: ``Trainer.validate`` with the ``RankMeMonitor``; inside it, the monitor's own time (its Lightning
  hooks and its forward hooks: capture, selection, RankMe, recording) is clocked by the overhead budget's timing
  (:class:`~capgeo_callbacks.run.budget.OverheadBudget`, the instrument a run's budget uses), ``own``;
- ``math``: RankMe's mathematics alone on the rows the monitor captured (the same layers): per layer the float64
  Gram matrix (one matrix product), its eigenvalues (``eigvalsh``) and the entropy of the spectrum, and for a layer
  whose rows ``rankme`` sends to the SVD route (nearly low-rank rows: the Gram route's error bound is above its
  tolerance) the float64 singular values too; ``gram`` is the same as if every layer took the Gram route;
- ``rankme``: :func:`~capgeo_callbacks.measures.rankme` on those rows (the mathematics with its checks: finite
  values, the Gram route's error bound); ``svd``: ``torch.linalg.svdvals`` of the float32 rows, for reference.

The figure is ``own / math`` (the issue's bound: at most 1.2). ``(monitor - plain) / math`` is printed beside it
as a cross-check: it subtracts two validations of a few hundred milliseconds, so its noise is larger than the
monitor's whole cost. The model is first trained ``--train-steps`` steps (AdamW, train.py's learning rate) so
that the hidden states are not those of initialisation.
"""

from __future__ import annotations

import argparse
import logging
import math
import warnings
from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor

import train
from benchmarks._timing import CLOCKS, add_timing_args, apply_timing_args, fmt_times, interleaved, median
from benchmarks._training import pretrain
from capgeo_callbacks import RankMeMonitor
from capgeo_callbacks.measures.rankme import _singular_values, rankme
from capgeo_callbacks.run.budget import MEASURE, OverheadBudget
from models import CapabilityModule


def make_trainer(callbacks: list[pl.Callback]) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu", devices=1, logger=False, callbacks=callbacks, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, deterministic=True,
    )


def captured_rows(monitor: RankMeMonitor, module: CapabilityModule, datamodule: Any) -> dict[str, Tensor]:
    """The rows the monitor measures: its own unit's capture over the validation set, per layer."""
    unit = monitor.unit
    module.eval()
    unit.attach(module)
    try:
        with torch.inference_mode():
            for batch in datamodule.val_dataloader():
                unit.update(batch)
                module(batch["input_ids"])
    finally:
        unit.detach()
    return {name: rows[: monitor.num_rows].clone() for name, (rows, _) in unit.capture.take().items()}


def mathematics(rows: Tensor, svd: bool) -> float:
    """RankMe's mathematics alone: the float64 Gram matrix, its eigenvalues and the spectrum's entropy; with
    ``svd`` (the rows whose Gram route ``rankme`` finds too inexact: nearly low-rank rows), also the float64 singular
    values it then computes instead."""
    z = rows.double()
    s = torch.linalg.eigvalsh(z.mT @ z).clamp(min=0.0).sqrt()
    if svd:
        s = torch.linalg.svdvals(z)
    p = s / s.sum() + 1e-7
    return math.exp(-float(torch.special.xlogy(p, p).sum()))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="sort")
    parser.add_argument("--difficulty", default="hard")
    parser.add_argument("--size", default="xs")
    parser.add_argument("--train-steps", type=int, default=50)
    add_timing_args(parser, repeats=15)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    clock = apply_timing_args(args)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)

    targs = train.parse_args(["--task", args.task, "--difficulty", args.difficulty, "--size", args.size,
                              "--seed", str(args.seed)])
    pl.seed_everything(args.seed, verbose=False)
    datamodule = train.make_datamodule(targs)
    module = CapabilityModule(size=args.size, vocab_size=datamodule.vocab_size, max_seq_len=datamodule.seq_len,
                              lr=targs.lr, max_steps=targs.max_steps)
    pretrain(module, datamodule, args.train_steps)

    monitor = RankMeMonitor(**train.MEASURE_OPTIONS["rankme"])  # the monitor exactly as train.py builds it
    plain_trainer, monitor_trainer = make_trainer([]), make_trainer([monitor])
    monitor.setup(monitor_trainer, module, "validate")
    layers = monitor.layer_names
    rows = captured_rows(monitor, module, datamodule)
    budget = OverheadBudget(MEASURE, clock=CLOCKS[clock])  # its timing only: "measure" thins nothing
    monitor.use_budget(budget)
    own: list[float] = []
    routes = {name: _singular_values(r, monitor.eps)[1] for name, r in rows.items()}

    def validate(trainer: pl.Trainer) -> None:
        trainer.validate(module, datamodule=datamodule, verbose=False)

    def watched() -> None:
        before = budget.work[monitor.work].seconds
        validate(monitor_trainer)
        own.append(budget.work[monitor.work].seconds - before)

    candidates = {
        "plain": lambda: validate(plain_trainer),
        "monitor": watched,
        "math": lambda: [mathematics(r, routes[name] == "svd") for name, r in rows.items()],
        "gram": lambda: [mathematics(r, False) for r in rows.values()],
        "rankme": lambda: [rankme(r) for r in rows.values()],
        "svd": lambda: [torch.linalg.svdvals(r) for r in rows.values()],
    }
    times = interleaved(candidates, args.repeats, clock=clock)
    times["own"] = own[-args.repeats:]  # the timed rounds (the warm-up's first)
    t = {name: median(values) for name, values in times.items()}
    ratio = t["own"] / t["math"]
    by_difference = (t["monitor"] - t["plain"]) / t["math"]

    # The monitor's values are RankMe of exactly these rows.
    logged = {tag: monitor.series[tag][-1][1] for tag in monitor.tags}
    expected = {f"rankme/{monitor.layer_tags[name]}": rankme(r) for name, r in rows.items()}
    rel_diff = max(abs(logged[tag] - expected[tag]) / expected[tag] for tag in expected)

    n_val = len(datamodule.eval_sequences("val"))
    print(f"{args.task}/{args.difficulty}, size {args.size} ({module.model.num_parameters():,} parameters), "
          f"{args.train_steps} training steps; validation: {n_val} examples x {datamodule.seq_len} tokens, "
          f"batches of {datamodule.eval_batch_size}; {args.threads} thread(s), {args.repeats} repeats, {clock} clock")
    print(f"watched: {len(layers)} layers x {monitor.num_rows} {monitor.selector_name} rows x "
          f"{next(iter(rows.values())).shape[1]} (RankMe {', '.join(f'{tag} {v:.1f}' for tag, v in logged.items())}; "
          f"routes: {', '.join(f'{monitor.layer_tags[name]} {route}' for name, route in routes.items())})")
    print(f"per evaluation, median {clock} ms (all repeats):")
    for name in times:
        print(f"  {name:<8}{fmt_times(times[name])}")
    print(f"the monitor's own time per evaluation: {t['own'] * 1e3:.2f} ms; RankMe's mathematics alone on its rows: "
          f"{t['math'] * 1e3:.2f} ms ({t['gram'] * 1e3:.2f} ms if every layer took the Gram route; rankme() with its "
          f"checks {t['rankme'] * 1e3:.2f} ms; float32 svdvals {t['svd'] * 1e3:.2f} ms)")
    print(f"ratio monitor / mathematics: {ratio:.3f} (target <= 1.2); monitor / rankme(): "
          f"{t['own'] / t['rankme']:.3f}; monitor / the Gram route alone: {t['own'] / t['gram']:.3f}; by the "
          f"validations' difference (monitor - plain) / mathematics: {by_difference:.2f} (noisy)")
    print(f"logged RankMe vs RankMe of the captured rows: max relative difference {rel_diff:.1e}")
    return {"times": times, "medians": t, "ratio": ratio, "by_difference": by_difference, "rel_diff": rel_diff,
            "logged": logged, "layers": layers}


if __name__ == "__main__":
    main()
