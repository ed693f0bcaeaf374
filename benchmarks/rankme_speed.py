"""`capgeo_callbacks.rankme` vs a float64 SVD followed by the same formula, tall and wide shapes.

    OMP_NUM_THREADS=1 python -m benchmarks.rankme_speed --repeats 3 --threads 1

For each shape from 512 x 128 to 8192 x 1024 and its transpose, on a float32 matrix like hidden
states (``--kind``: ``noisy`` = a decaying rank-K/8 signal over 1% isotropic noise; ``collapsed`` =
rank 2 over a 1e-6 noise floor; ``lowrank`` = exactly rank 8 in float64, which sends `rankme` to its
SVD fallback), times

- ``rankme(z)``: Gram matrix of the smaller side + eigvalsh in float64 (SVD fallback when the Gram
  route's error bound is not negligible), and
- the baseline ``rankme_from_singular_values(torch.linalg.svdvals(z.double()))``, the SVD as given,
  plus the same SVD on the tall orientation (``z.mT`` for a wide matrix), the faster of the two;

interleaved, ``repeats`` times each after a warm-up, and prints the medians, the ratios (baseline /
rankme: above 1 means rankme is faster) and the largest relative difference of the values.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from benchmarks._timing import add_timing_args, apply_timing_args, interleaved, median
from capgeo_callbacks.measures.rankme import _singular_values, rankme, rankme_from_singular_values

DEFAULT_SHAPES = ("512x128", "2048x128", "2048x512", "8192x512", "8192x1024")
KINDS = ("noisy", "collapsed", "lowrank")


def parse_shape(text: str) -> tuple[int, int]:
    rows, cols = (int(part) for part in text.lower().split("x"))
    return rows, cols


def make_matrix(rows: int, cols: int, kind: str, seed: int = 0) -> Tensor:
    """A test matrix of ``kind`` (see the module docstring), float32 except ``lowrank`` (float64)."""
    gen = torch.Generator().manual_seed(seed)
    k = min(rows, cols)
    if kind == "lowrank":
        rank = min(8, k)
        left = torch.randn(rows, rank, generator=gen, dtype=torch.float64)
        return left @ torch.randn(rank, cols, generator=gen, dtype=torch.float64)
    rank, noise = (max(1, k // 8), 1e-2) if kind == "noisy" else (min(2, k), 1e-6)
    scales = 0.8 ** torch.arange(rank, dtype=torch.float32)  # decaying signal directions
    signal = (torch.randn(rows, rank, generator=gen) * scales) @ torch.randn(rank, cols, generator=gen)
    signal /= signal.std()
    return signal + noise * torch.randn(rows, cols, generator=gen)


def svd_rankme(z: Tensor, eps: float = 1e-7, tall: bool = False) -> float:
    """The baseline: float64 singular values by ``torch.linalg.svdvals``, then RankMe's formula."""
    z64 = z.to(torch.float64)
    if tall and z64.shape[0] < z64.shape[1]:
        z64 = z64.mT
    return rankme_from_singular_values(torch.linalg.svdvals(z64), eps)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES),
                        help="tall shapes NxD; each is also run wide (DxN)")
    parser.add_argument("--kind", default="noisy", choices=KINDS)
    add_timing_args(parser)
    args = parser.parse_args(argv)
    clock = apply_timing_args(args)

    results: list[dict[str, Any]] = []
    print(f"rankme vs float64 svdvals + formula; kind={args.kind}, {args.repeats} repeats, "
          f"{args.threads} thread(s); times are medians in {clock} ms")
    print(f"{'shape':>11} {'route':>5} {'rankme':>9} {'svd':>9} {'svd-tall':>9} {'svd/rankme':>10} "
          f"{'best-svd/rankme':>15} {'rel diff':>9}")
    for text in args.shapes:
        rows, cols = parse_shape(text)
        for shape in ((rows, cols), (cols, rows)) if rows != cols else ((rows, cols),):
            z = make_matrix(*shape, kind=args.kind)
            value, reference = rankme(z), svd_rankme(z)
            candidates = {"rankme": lambda z=z: rankme(z), "svd": lambda z=z: svd_rankme(z)}
            if shape[0] < shape[1]:
                candidates["svd-tall"] = lambda z=z: svd_rankme(z, tall=True)
            times = interleaved(candidates, args.repeats, clock=clock)
            t = {name: median(values) for name, values in times.items()}
            best_svd = min(t["svd"], t.get("svd-tall", float("inf")))
            row = {
                "shape": shape, "kind": args.kind, "route": _singular_values(z, 1e-7)[1],
                "rankme_s": t["rankme"], "svd_s": t["svd"], "svd_tall_s": t.get("svd-tall"),
                "ratio": t["svd"] / t["rankme"], "ratio_best": best_svd / t["rankme"],
                "rankme": value, "reference": reference, "rel_diff": abs(value - reference) / reference,
            }
            results.append(row)
            tall_ms = f"{t['svd-tall'] * 1e3:9.2f}" if "svd-tall" in t else f"{'-':>9}"
            print(f"{shape[0]:>5}x{shape[1]:<5} {row['route']:>5} {t['rankme'] * 1e3:9.2f} {t['svd'] * 1e3:9.2f} "
                  f"{tall_ms} {row['ratio']:10.2f} {row['ratio_best']:15.2f} {row['rel_diff']:9.1e}")
    worst = max(r["rel_diff"] for r in results)
    slowest = min(results, key=lambda r: r["ratio_best"])
    print(f"max relative difference: {worst:.1e}")
    print(f"speed-up over the best SVD: min {slowest['ratio_best']:.2f}x "
          f"({slowest['shape'][0]}x{slowest['shape'][1]}), "
          f"median {median([r['ratio_best'] for r in results]):.2f}x; over svdvals as given: "
          f"min {min(r['ratio'] for r in results):.2f}x, median {median([r['ratio'] for r in results]):.2f}x")
    return results


if __name__ == "__main__":
    main()
