"""`RankMeMonitor` per evaluation vs its mathematics alone on the same rows and layers.

    OMP_NUM_THREADS=1 python -m benchmarks.rankme_monitor --task sort --difficulty hard --repeats 15 --threads 1

The real setting of ``train.py``: the smallest capgeo model (``CapabilityModule``, size ``xs``) on the
task's datamodule with train.py's validation settings (``train.make_datamodule``: 512 validation examples in one
batch of 1024), and the ``RankMeMonitor`` that train.py's default run builds (``train.MEASURE_OPTIONS["rankme"]``:
``model.blocks.*`` and ``model.norm_f``, the ``first_answer`` rows, 512 of them; with the default measures, ILDR on
the same rows). Times, interleaved and ``repeats`` times each after a warm-up:

- ``plain``: ``Trainer.validate`` without callbacks;
- ``monitor``: ``Trainer.validate`` with the ``RankMeMonitor``; inside it, the monitor's own time (its Lightning
  hooks and its forward hooks: capture, selection, RankMe and ILDR on the same rows, recording) is clocked by the
  overhead budget's timing (:class:`~capgeo_callbacks.run.budget.OverheadBudget`, the instrument a run's budget
  uses), ``own``;
- ``alone``: the same with the monitor's ILDR switched off (``ildr_prefix=None``): RankMe's monitor alone, whose own
  time is ``own_alone``;
- ``math``: RankMe's mathematics alone on the rows the monitor captured (the same layers): per layer the float64
  Gram matrix (one matrix product), its eigenvalues (``eigvalsh``) and the entropy of the spectrum, and for a layer
  whose rows ``rankme`` sends to the SVD route (nearly low-rank rows: the Gram route's error bound is above its
  tolerance) the float64 singular values too; ``gram`` is the same as if every layer took the Gram route;
- ``rankme``: :func:`~capgeo_callbacks.measures.rankme` on those rows (the mathematics with its checks: finite
  values, the Gram route's error bound); ``svd``: ``torch.linalg.svdvals`` of the float32 rows, for reference;
- ``ildr``: :func:`~capgeo_callbacks.measures.ildr` on the same rows and their targets (the monitor's second
  measure, where the rows have targets).

The figure is ``own_alone / math``, RankMe's monitor against RankMe's mathematics (the bound: at most 1.2); the
default monitor, which measures ILDR on its rows too, is set against both measures' mathematics, ``own / (math +
ildr)``. ``(monitor - plain) / (math + ildr)`` is printed beside them as a cross-check: it subtracts two
validations of a few hundred milliseconds, so its noise is larger than the monitor's whole cost. The model is first
trained ``--train-steps`` steps (AdamW, train.py's learning rate) so that the hidden states are not those of
initialisation.
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
from capgeo_callbacks.measures.ildr import ildr
from capgeo_callbacks.measures.rankme import _singular_values, rankme
from capgeo_callbacks.registry import build_measure_callbacks
from capgeo_callbacks.run.budget import MEASURE, OverheadBudget
from models import CapabilityModule


def make_trainer(callbacks: list[pl.Callback]) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu", devices=1, logger=False, callbacks=callbacks, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, deterministic=True,
    )


def captured_rows(monitor: RankMeMonitor, module: CapabilityModule,
                  datamodule: Any) -> dict[str, tuple[Tensor, Tensor | None]]:
    """The rows the monitor measures, and their targets (ILDR's classes; None without ILDR): its own unit's capture
    over the validation set, per layer."""
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
    return {name: (rows[: monitor.num_rows].clone(), None if labels is None else labels[: monitor.num_rows].clone())
            for name, (rows, labels) in unit.capture.take().items()}


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

    # the monitor exactly as train.py's default run builds it (ILDR on its rows), and with RankMe alone
    (monitor,) = build_measure_callbacks(["rankme", "ildr"], {"rankme": train.MEASURE_OPTIONS["rankme"]})
    (alone,) = build_measure_callbacks(["rankme"], {"rankme": train.MEASURE_OPTIONS["rankme"]})
    assert isinstance(monitor, RankMeMonitor) and isinstance(alone, RankMeMonitor) and alone.ildr_prefix is None
    plain_trainer, monitor_trainer, alone_trainer = make_trainer([]), make_trainer([monitor]), make_trainer([alone])
    monitor.setup(monitor_trainer, module, "validate")
    alone.setup(alone_trainer, module, "validate")
    layers = monitor.layer_names
    captured = captured_rows(monitor, module, datamodule)
    rows = {name: r for name, (r, _) in captured.items()}
    targets = {name: y for name, (_, y) in captured.items() if y is not None and monitor.ildr_prefix is not None}
    own: dict[str, list[float]] = {"own": [], "own_alone": []}
    for watching in (monitor, alone):
        watching.use_budget(OverheadBudget(MEASURE, clock=CLOCKS[clock]))  # its timing only: "measure" thins nothing
    routes = {name: _singular_values(r, monitor.eps)[1] for name, r in rows.items()}

    def validate(trainer: pl.Trainer) -> None:
        trainer.validate(module, datamodule=datamodule, verbose=False)

    def watched(name: str, watching: RankMeMonitor, trainer: pl.Trainer) -> None:
        work = watching.budget.work[watching.work]
        before = work.seconds
        validate(trainer)
        own[name].append(work.seconds - before)

    candidates = {
        "plain": lambda: validate(plain_trainer),
        "monitor": lambda: watched("own", monitor, monitor_trainer),
        "alone": lambda: watched("own_alone", alone, alone_trainer),
        "math": lambda: [mathematics(r, routes[name] == "svd") for name, r in rows.items()],
        "gram": lambda: [mathematics(r, False) for r in rows.values()],
        "rankme": lambda: [rankme(r) for r in rows.values()],
        "ildr": lambda: [ildr(rows[name], y) for name, y in targets.items()],
        "svd": lambda: [torch.linalg.svdvals(r) for r in rows.values()],
    }
    times = interleaved(candidates, args.repeats, clock=clock)
    for name, values in own.items():
        times[name] = values[-args.repeats:]  # the timed rounds (the warm-up's first)
    t = {name: median(values) for name, values in times.items()}
    ratio = t["own_alone"] / t["math"]
    with_ildr = t["own"] / (t["math"] + t["ildr"])
    by_difference = (t["monitor"] - t["plain"]) / (t["math"] + t["ildr"])

    # The monitor's values are RankMe and ILDR of exactly these rows (an undefined ILDR, NaN, on both sides).
    logged = {tag: monitor.series[tag][-1][1] for tag in monitor.tags}
    expected = {f"rankme/{monitor.layer_tags[name]}": rankme(r) for name, r in rows.items()}
    expected |= {f"{monitor.ildr_prefix}/{monitor.layer_tags[name]}": ildr(rows[name], y)
                 for name, y in targets.items()}
    rel_diff = max(0.0 if math.isnan(logged[tag]) and math.isnan(value) else abs(logged[tag] - value) / abs(value)
                   for tag, value in expected.items())

    n_val = len(datamodule.eval_sequences("val"))
    print(f"{args.task}/{args.difficulty}, size {args.size} ({module.model.num_parameters():,} parameters), "
          f"{args.train_steps} training steps; validation: {n_val} examples x {datamodule.seq_len} tokens, "
          f"batches of {datamodule.eval_batch_size}; {args.threads} thread(s), {args.repeats} repeats, {clock} clock")
    ranks = ", ".join(f"{tag} {v:.1f}" for tag, v in logged.items() if tag.startswith("rankme/"))
    print(f"watched: {len(layers)} layers x {monitor.num_rows} {monitor.selector_name} rows x "
          f"{next(iter(rows.values())).shape[1]} (RankMe {ranks}; "
          f"routes: {', '.join(f'{monitor.layer_tags[name]} {route}' for name, route in routes.items())})")
    print(f"per evaluation, median {clock} ms (all repeats):")
    for name in times:
        print(f"  {name:<8}{fmt_times(times[name])}")
    print(f"RankMe's monitor alone (ILDR off), its own time per evaluation: {t['own_alone'] * 1e3:.2f} ms; RankMe's "
          f"mathematics alone on its rows: {t['math'] * 1e3:.2f} ms ({t['gram'] * 1e3:.2f} ms if every layer took the "
          f"Gram route; rankme() with its checks {t['rankme'] * 1e3:.2f} ms; float32 svdvals {t['svd'] * 1e3:.2f} ms)")
    print(f"ratio monitor / mathematics: {ratio:.3f} (target <= 1.2); monitor / rankme(): "
          f"{t['own_alone'] / t['rankme']:.3f}; monitor / the Gram route alone: {t['own_alone'] / t['gram']:.3f}")
    print(f"the default monitor, RankMe and ILDR on the same rows: {t['own'] * 1e3:.2f} ms against their mathematics "
          f"{(t['math'] + t['ildr']) * 1e3:.2f} ms (ILDR's {t['ildr'] * 1e3:.2f} ms): {with_ildr:.3f}; by the "
          f"validations' difference (monitor - plain) / both mathematics: {by_difference:.2f} (noisy)")
    print(f"logged RankMe and ILDR vs those of the captured rows: max relative difference {rel_diff:.1e}")
    return {"times": times, "medians": t, "ratio": ratio, "with_ildr": with_ildr, "by_difference": by_difference,
            "rel_diff": rel_diff, "logged": logged, "layers": layers}


if __name__ == "__main__":
    main()
