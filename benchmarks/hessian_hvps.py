"""Hessian-vector products to the top Hessian eigenvalue within 1%: Lanczos vs plain power iteration.

    OMP_NUM_THREADS=1 python -m benchmarks.hessian_hvps --threads 1

Problems (``--problems``, default all):

- ``quadratic-gap``: 0.5 x^T A x with a known spectrum and a small gap at the top (1, 0.99, 0.98, then
  397 values spread over [0, 0.97]; the spectrum of ``tests/measures/test_hessian.py``);
- ``quadratic-outlier``: a known spectrum with one outlier (1, 0.5, 0.3, then 997 values over
  [-0.1, 0.2]), the shape a trained network's Hessian tends to have, where power iteration does well;
- ``transformer``: the answer-masked loss of the smallest capgeo transformer (``xs``, 414,976
  parameters, trained ``--train-steps`` steps) on one batch of ``--batch-size`` examples of a task
  (default ``mod``/``hard``: `HessianMonitor`'s batch size), in eval mode; the reference eigenvalue is
  Lanczos run to a residual of 1e-9 relative, cross-checked by the power iteration's last value;
- ``transformer-init``: the same at initialisation, where the top eigenvalues crowd together.

Every Hessian-vector product goes through one counting wrapper (of the HVP function shared by
:func:`~capgeo_callbacks.measures.hessian.lanczos` and
:func:`~capgeo_callbacks.measures.hessian.power_iteration_top_eigenvalue`), which also records power
iteration's Rayleigh quotient v^T H v at every product. The HVPs needed for 1% are:

- Lanczos (``hessian_top_eigenvalues``' method): the smallest Krylov dimension n whose top Ritz value
  is within 1% of the reference (binary search: the top Ritz value only grows with n);
- power iteration: the first product after which every Rayleigh quotient stays within 1%.

Both start from the same seeded Gaussian vector. The script also prints what each needs with its
own stopping rule (Lanczos: residual <= 1% of the top Ritz value; power iteration: relative change
<= 1e-4 between products) and the error that leaves.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

import tasks
from benchmarks._training import pretrain
from capgeo_callbacks.measures import hessian
from models import build_model
from models.lightning_module import answer_loss

PROBLEMS = ("quadratic-gap", "quadratic-outlier", "transformer", "transformer-init")
ACCURACY = 0.01


class _Enough(Exception):
    """Raised by the counter to end a run early."""


class HVPCounter:
    """Counts every Hessian-vector product and records the Rayleigh quotient v^T H v / v^T v of each.

    ``stop(rayleigh)``, if given, ends the run (by an exception that :meth:`installed` swallows) once
    it returns True.
    """

    def __init__(self, stop: Callable[[list[float]], bool] | None = None) -> None:
        self.count = 0
        self.rayleigh: list[float] = []
        self.stop = stop
        self.stopped = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[HVPCounter]:
        original = hessian._HessianVectorProduct.__call__
        counter = self

        def counted(hvp: Any, vector: Tensor) -> Tensor:
            product = original(hvp, vector)
            counter.count += 1
            counter.rayleigh.append(float(vector @ product) / float(vector @ vector))
            if counter.stop is not None and counter.stop(counter.rayleigh):
                counter.stopped = True
                raise _Enough
            return product

        hessian._HessianVectorProduct.__call__ = counted
        try:
            yield self
        except _Enough:
            pass
        finally:
            hessian._HessianVectorProduct.__call__ = original


def quadratic(eigenvalues: Tensor, seed: int) -> tuple[Callable[[], Tensor], list[Tensor]]:
    """0.5 x^T A x with A = Q diag(eigenvalues) Q^T for a random orthogonal Q (Hessian = A)."""
    gen = torch.Generator().manual_seed(seed)
    dim = eigenvalues.numel()
    q = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))[0]
    matrix = (q * eigenvalues) @ q.T
    x = torch.randn(dim, generator=gen, dtype=torch.float64).requires_grad_(True)
    return lambda: 0.5 * x @ matrix @ x, [x]


def transformer(
    task: str, difficulty: str, train_steps: int, batch_size: int
) -> tuple[Callable[[], Tensor], list[Tensor]]:
    """The xs model's answer-masked loss on one fixed batch, after ``train_steps`` AdamW steps; eval mode."""
    torch.manual_seed(0)
    datamodule = tasks.make_datamodule(task, difficulty, seed=0, batch_size=64)
    model = build_model("xs", datamodule.vocab_size, datamodule.seq_len)
    pretrain(model, datamodule, train_steps, weight_decay=0.1)
    batch = datamodule.to_batch(datamodule.train_sequences(10**6, batch_size=batch_size))
    closure = lambda: answer_loss(model(batch["input_ids"]), batch["targets"], batch["answer_mask"])
    return closure, [p for p in model.parameters() if p.requires_grad]


def make_problem(name: str, args: argparse.Namespace) -> tuple[Callable[[], Tensor], list[Tensor], float | None]:
    """(loss closure, parameters, exact top eigenvalue or None)."""
    f64 = torch.float64
    if name == "quadratic-gap":
        spectrum = torch.cat([torch.tensor([1.0, 0.99, 0.98], dtype=f64), torch.linspace(0.0, 0.97, 397, dtype=f64)])
        return (*quadratic(spectrum, seed=2), 1.0)
    if name == "quadratic-outlier":
        spectrum = torch.cat([torch.tensor([1.0, 0.5, 0.3], dtype=f64), torch.linspace(-0.1, 0.2, 997, dtype=f64)])
        return (*quadratic(spectrum, seed=3), 1.0)
    steps = 0 if name == "transformer-init" else args.train_steps
    return (*transformer(args.task, args.difficulty, steps, args.batch_size), None)


def lanczos_top(closure: Callable[[], Tensor], params: list[Tensor], n: int, seed: int) -> tuple[float, int]:
    """Top Ritz value after exactly n Lanczos steps, and the HVPs counted."""
    with HVPCounter().installed() as counter:
        result = hessian.lanczos(closure, params, k=1, num_iterations=n, tol=0.0,
                                 generator=torch.Generator().manual_seed(seed))
    assert counter.count == result.num_hvps == n, (counter.count, result.num_hvps, n)
    return float(result.eigenvalues[0]), counter.count


def lanczos_hvps_to(closure: Callable[[], Tensor], params: list[Tensor], reference: float, upper: int,
                    seed: int) -> int | None:
    """Smallest n with the top Ritz value within ACCURACY of ``reference`` (None if ``upper`` is not enough)."""
    def within(n: int) -> bool:
        return abs(lanczos_top(closure, params, n, seed)[0] - reference) <= ACCURACY * abs(reference)

    if not within(upper):
        return None
    low, high = 1, upper
    while low < high:
        mid = (low + high) // 2
        if within(mid):
            high = mid
        else:
            low = mid + 1
    return low


def power_trace(closure: Callable[[], Tensor], params: list[Tensor], n: int, seed: int,
                reference: float | None = None) -> list[float]:
    """Power iteration's Rayleigh quotient after each of up to n HVPs.

    With a ``reference``, the run ends once the quotient has stayed within ACCURACY of it for
    max(50, k) products since it entered at product k (the expensive transformer problem).
    """
    def settled(trace: list[float]) -> bool:
        first = first_stably_within(trace, reference)  # type: ignore[arg-type]
        return first is not None and len(trace) - first + 1 >= max(50, first)

    counter = HVPCounter(stop=None if reference is None else settled)
    with counter.installed():
        hessian.power_iteration_top_eigenvalue(closure, params, num_iterations=n, tol=0.0,
                                               generator=torch.Generator().manual_seed(seed))
    assert counter.count == n or counter.stopped, (counter.count, n)
    return counter.rayleigh


def first_stably_within(trace: list[float], reference: float) -> int | None:
    """The first HVP count from which every later value is within ACCURACY of ``reference``."""
    first = None
    for i, value in enumerate(trace, start=1):
        inside = abs(value - reference) <= ACCURACY * abs(reference)
        first = (i if first is None else first) if inside else None
    return first


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=PROBLEMS)
    parser.add_argument("--task", default="mod")
    parser.add_argument("--difficulty", default="hard")
    parser.add_argument("--train-steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--max-lanczos", type=int, default=80, help="Krylov dimension searched up to")
    parser.add_argument("--max-power", type=int, default=1500, help="power iterations run on the quadratics")
    parser.add_argument("--max-power-transformer", type=int, default=300,
                        help="power iterations run at most on the transformer problems")
    parser.add_argument("--seed", type=int, default=5, help="seed of the common start vector")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    print(f"HVPs to the top Hessian eigenvalue within {ACCURACY:.0%}: Lanczos vs power iteration")
    results = []
    for name in args.problems:
        closure, params, exact = make_problem(name, args)
        dim = sum(p.numel() for p in params)
        if exact is None:  # converged Lanczos as the reference
            reference_run = hessian.lanczos(closure, params, k=1, num_iterations=min(dim, 200), tol=1e-9,
                                            generator=torch.Generator().manual_seed(args.seed + 1))
            reference = float(reference_run.eigenvalues[0])
            power = power_trace(closure, params, args.max_power_transformer, args.seed, reference)
            note = (f"reference {reference:.6g} (Lanczos, {reference_run.num_hvps} HVPs, residual "
                    f"{float(reference_run.residuals[0]):.1e}; power iteration after {len(power)}: {power[-1]:.6g})")
        else:
            reference = exact
            power = power_trace(closure, params, args.max_power, args.seed)
            note = f"exact top eigenvalue {exact:g}"
        lanczos_n = lanczos_hvps_to(closure, params, reference, min(dim, args.max_lanczos), args.seed)
        power_n = first_stably_within(power, reference)

        # Each with its own stopping rule.
        with HVPCounter().installed() as counter:
            stopped = hessian.lanczos(closure, params, k=1, tol=ACCURACY, num_iterations=min(dim, args.max_lanczos),
                                      generator=torch.Generator().manual_seed(args.seed))
        lanczos_rule = (counter.count, abs(float(stopped.eigenvalues[0]) - reference) / abs(reference))
        with HVPCounter().installed() as counter:
            value, _ = hessian.power_iteration_top_eigenvalue(
                closure, params, num_iterations=len(power), tol=1e-4, generator=torch.Generator().manual_seed(args.seed)
            )
        power_rule = (counter.count, abs(value - reference) / abs(reference))

        ratio = None if lanczos_n is None or power_n is None else power_n / lanczos_n
        shown = {"l": "not reached" if lanczos_n is None else str(lanczos_n),
                 "p": f"not reached (last value {power[-1]:.4g})" if power_n is None else str(power_n)}
        print(f"{name} (P = {dim:,}): {note}")
        print(f"  HVPs to 1%: Lanczos {shown['l']}, power iteration {shown['p']} (of {len(power)} run)"
              + ("" if ratio is None else f"; ratio power / Lanczos {ratio:.1f}x"))
        print(f"  own stopping rules: Lanczos (residual <= 1%) {lanczos_rule[0]} HVPs, error {lanczos_rule[1]:.1e}; "
              f"power (change <= 1e-4) {power_rule[0]} HVPs, error {power_rule[1]:.1e}")
        results.append({"problem": name, "dim": dim, "reference": reference, "lanczos_hvps": lanczos_n,
                        "power_hvps": power_n, "ratio": ratio, "lanczos_rule": lanczos_rule,
                        "power_rule": power_rule})
    return results


if __name__ == "__main__":
    main()
