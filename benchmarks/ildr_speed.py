"""The cost of ILDR beside RankMe's on the same rows: what measuring it adds at each evaluation.

    OMP_NUM_THREADS=1 python -m benchmarks.ildr_speed --repeats 5 --threads 1

For each shape N x D (N rows of a layer, as the monitors keep them; train.py keeps 512) and ``--classes`` classes
(the targets at the rows: 97 for ``mod``'s answers), on float32 rows like hidden states (Gaussian classes around
random centroids), times ``ildr(z, y)`` and ``rankme(z)`` interleaved, ``repeats`` times each after a warm-up, and
prints the medians and the ratio ILDR / RankMe (below 1: ILDR is cheaper).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from benchmarks._timing import add_timing_args, apply_timing_args, interleaved, median
from benchmarks.rankme_speed import parse_shape
from capgeo_callbacks.measures.ildr import ildr
from capgeo_callbacks.measures.rankme import rankme

DEFAULT_SHAPES = ("512x128", "2048x128", "2048x512", "8192x512")


def classed_rows(rows: int, cols: int, classes: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """``rows`` float32 rows in ``classes`` Gaussian classes (unit noise around centroids of norm about 2), and their
    integer classes."""
    gen = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, classes, (rows,), generator=gen)
    centroids = 2 * torch.randn(classes, cols, generator=gen) / cols**0.5
    return centroids[targets] + torch.randn(rows, cols, generator=gen) / cols**0.5, targets


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES), help="shapes NxD (rows x features)")
    parser.add_argument("--classes", type=int, default=97, help="classes among the rows' targets")
    add_timing_args(parser, repeats=5)
    args = parser.parse_args(argv)
    clock = apply_timing_args(args)

    results: list[dict[str, Any]] = []
    print(f"ILDR vs RankMe on the same rows; {args.classes} classes, {args.repeats} repeats, {args.threads} "
          f"thread(s); times are medians in {clock} ms")
    print(f"{'shape':>11} {'ildr':>9} {'rankme':>9} {'ildr/rankme':>11} {'ILDR':>8}")
    for text in args.shapes:
        shape = parse_shape(text)
        z, y = classed_rows(*shape, classes=args.classes)
        times = interleaved({"ildr": lambda z=z, y=y: ildr(z, y), "rankme": lambda z=z: rankme(z)}, args.repeats,
                            clock=clock)
        t = {name: median(values) for name, values in times.items()}
        row = {"shape": shape, "classes": args.classes, "ildr_s": t["ildr"], "rankme_s": t["rankme"],
               "ratio": t["ildr"] / t["rankme"], "ildr": ildr(z, y)}
        results.append(row)
        print(f"{shape[0]:>5}x{shape[1]:<5} {t['ildr'] * 1e3:9.2f} {t['rankme'] * 1e3:9.2f} {row['ratio']:11.2f} "
              f"{row['ildr']:8.3f}")
    print(f"ratio ILDR / RankMe: median {median([r['ratio'] for r in results]):.2f}, "
          f"max {max(r['ratio'] for r in results):.2f}")
    return results


if __name__ == "__main__":
    main()
