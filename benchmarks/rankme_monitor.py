"""`RankMeMonitor` per evaluation vs its floor: the validation pass it rides on plus one SVD of its rows.

    OMP_NUM_THREADS=1 python -m benchmarks.rankme_monitor --task sort --difficulty hard --repeats 7 --threads 1

The real setting of ``train.py``: the smallest capgeo model (``CapabilityModule``, size ``xs``) on the
task's datamodule with train.py's validation settings (``train.make_datamodule``: enough validation
examples for 2048 answer rows, at least 256, in batches of 1024), and the ``RankMeMonitor`` that
train.py builds (``train.MEASURE_OPTIONS["rankme"]``: ``model.blocks.*`` and ``model.norm_f``, answer
rows, 2048 of them). Times, interleaved and
``repeats`` times each after a warm-up:

- ``plain``: ``Trainer.validate`` without callbacks;
- ``monitor``: ``Trainer.validate`` with the ``RankMeMonitor``;
- ``svd``: one ``torch.linalg.svdvals`` per watched layer on the rows the monitor captures (float32,
  as captured; ``svd64`` is the same in float64, printed for reference).

The floor is plain + svd; the figure is monitor / floor (target: <= 1.2). The model is first
trained ``--train-steps`` steps (AdamW, train.py's learning rate) so that the hidden states are not
those of initialisation.
"""

from __future__ import annotations

import argparse
import logging
import warnings
from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor

import train
from benchmarks._timing import add_timing_args, apply_timing_args, fmt_times, interleaved, median
from benchmarks._training import pretrain
from capgeo_callbacks import RankMeMonitor
from capgeo_callbacks.capture.layers import resolve_layers
from capgeo_callbacks.measures.rankme import _singular_values, rankme
from models import CapabilityModule


def make_trainer(callbacks: list[pl.Callback]) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu", devices=1, logger=False, callbacks=callbacks, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, deterministic=True,
    )


def captured_rows(module: CapabilityModule, datamodule: Any, layers: Sequence[str], num_rows: int) -> dict[str, Tensor]:
    """The rows the monitor sees: the first ``num_rows`` answer rows of the validation set, per layer."""
    modules = dict(module.named_modules())
    outputs: dict[str, list[Tensor]] = {name: [] for name in layers}
    handles = [modules[name].register_forward_hook(lambda m, a, out, name=name: outputs[name].append(out))
               for name in layers]
    module.eval()
    try:
        with torch.inference_mode():
            for batch in datamodule.val_dataloader():
                module(batch["input_ids"])
                for name in layers:  # (B, T, D) -> answer rows (n, D)
                    outputs[name][-1] = outputs[name][-1][batch["answer_mask"]]
    finally:
        for handle in handles:
            handle.remove()
    return {name: torch.cat(parts)[:num_rows].float().clone() for name, parts in outputs.items()}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="sort")
    parser.add_argument("--difficulty", default="hard")
    parser.add_argument("--size", default="xs")
    parser.add_argument("--train-steps", type=int, default=50)
    add_timing_args(parser, repeats=7)
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

    options = train.MEASURE_OPTIONS["rankme"]  # the monitor exactly as train.py builds it
    monitor = RankMeMonitor(**options)
    plain_trainer, monitor_trainer = make_trainer([]), make_trainer([monitor])
    layers = resolve_layers(module, monitor.layer_patterns)
    rows = captured_rows(module, datamodule, layers, monitor.num_rows)
    rows64 = {name: r.double() for name, r in rows.items()}

    def validate(trainer: pl.Trainer) -> None:
        trainer.validate(module, datamodule=datamodule, verbose=False)

    def svd(matrices: dict[str, Tensor]) -> None:
        for matrix in matrices.values():
            torch.linalg.svdvals(matrix)

    candidates = {
        "plain": lambda: validate(plain_trainer),
        "monitor": lambda: validate(monitor_trainer),
        "svd": lambda: svd(rows),
        "svd64": lambda: svd(rows64),
        "rankme": lambda: [rankme(r) for r in rows.values()],
    }
    times = interleaved(candidates, args.repeats, clock=clock)
    t = {name: median(values) for name, values in times.items()}
    floor = t["plain"] + t["svd"]
    ratio = t["monitor"] / floor

    # The monitor's values are RankMe of exactly these rows.
    logged = {tag: monitor.series[tag][-1][1] for tag in monitor.tags}
    expected = {f"rankme/{monitor.layer_tags[name]}": rankme(r) for name, r in rows.items()}
    rel_diff = max(abs(logged[tag] - expected[tag]) / expected[tag] for tag in expected)

    n_val = len(datamodule.eval_sequences("val"))
    print(f"{args.task}/{args.difficulty}, size {args.size} ({module.model.num_parameters():,} parameters), "
          f"{args.train_steps} training steps; validation: {n_val} examples x {datamodule.seq_len} tokens, "
          f"batches of {datamodule.eval_batch_size}; {args.threads} thread(s), {args.repeats} repeats, {clock} clock")
    print(f"watched: {len(layers)} layers x {monitor.num_rows} rows x {next(iter(rows.values())).shape[1]} "
          f"(RankMe {', '.join(f'{tag} {value:.1f}' for tag, value in logged.items())}; routes "
          f"{', '.join(sorted({_singular_values(r, 1e-7)[1] for r in rows.values()}))})")
    print(f"per evaluation, median {clock} ms (all repeats):")
    for name in candidates:
        print(f"  {name:<8}{fmt_times(times[name])}")
    print(f"monitor overhead over plain validation: {(t['monitor'] - t['plain']) * 1e3:.1f} ms "
          f"(the SVD alone: {t['svd'] * 1e3:.1f} ms float32, {t['svd64'] * 1e3:.1f} ms float64; "
          f"rankme on the rows: {t['rankme'] * 1e3:.1f} ms)")
    print(f"floor (plain + svd): {floor * 1e3:.1f} ms; ratio monitor / floor: {ratio:.3f} (target <= 1.2)")
    print(f"logged RankMe vs RankMe of the captured rows: max relative difference {rel_diff:.1e}")
    return {"times": times, "medians": t, "floor": floor, "ratio": ratio, "rel_diff": rel_diff,
            "logged": logged, "layers": layers}


if __name__ == "__main__":
    main()
