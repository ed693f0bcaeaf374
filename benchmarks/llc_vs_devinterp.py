"""`estimate_llc` vs devinterp's `estimate_learning_coeff_with_summary` on the same model and settings.

    OMP_NUM_THREADS=1 python -m benchmarks.llc_vs_devinterp --repeats 3 --threads 1

Problems (``--problems``, default all):

- ``lsq-full`` and ``lsq-minibatch``: the peer comparison of ``tests/measures/test_llc.py``, a linear
  regression (``nn.Linear(4, 1)``) at its least-squares solution on 500 noisy examples, batch 500
  (full) or 50 (shuffled); 8 chains, 500 draws, eps 3e-4, gamma 10, nbeta = b / log b, seed 0;
- ``transformer``: the smallest capgeo transformer (``xs``, trained ``--train-steps`` steps) on
  ``mod``/``hard`` batches, with ``LLCMonitor``'s defaults: 4 chains, 200 draws (``--draws``), eps 1e-4,
  gamma 100, a fixed set of 4 batches of 128 examples, answer-masked cross-entropy, but 50 draws
  (``--draws``) to keep the run short.

Both estimators get the same model, DataLoader, loss and settings (devinterp 1.3.2: SGLD with
``localization``, no burn-in, one step per draw, ``cores=1``). For each problem the two are timed,
interleaved, ``repeats`` times (each call is one whole estimate), and the script prints both
estimates as mean +- std over chains, their difference in units of its standard error, and the time
ratio devinterp / capgeo (above 1: capgeo is faster). ``capgeo`` runs its default (``vectorize=None``: all
chains at once under ``torch.func.vmap`` up to ``VMAP_MAX_PARAMETERS`` parameters, one after another above),
and ``capgeo-other`` forces the other path.
A last timing, ``gradients``, is the compute floor of any of them: the chains x draws loss gradients
alone, one after another, with no sampler.
"""

from __future__ import annotations

import argparse
import copy
import logging
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import tasks
from benchmarks._timing import add_timing_args, apply_timing_args, fmt_times, interleaved, median
from benchmarks._training import pretrain
from capgeo_callbacks import estimate_llc
from capgeo_callbacks.measures.llc import VMAP_MAX_PARAMETERS
from models import build_model
from models.lightning_module import answer_loss

PROBLEMS = ("lsq-full", "lsq-minibatch", "transformer")


class FastTensorDataset(TensorDataset):
    """Fetches a whole batch by tensor indexing (DataLoader's ``__getitems__`` hook), as in the tests."""

    def __getitems__(self, indices: list[int]) -> tuple[Tensor, ...]:
        index = torch.as_tensor(indices)
        return tuple(t[index] for t in self.tensors)


class DictDataset(Dataset):
    """Fixed dict batches, fetched a whole batch at a time."""

    def __init__(self, batch: dict[str, Tensor]) -> None:
        self.batch = batch

    def __len__(self) -> int:
        return self.batch["input_ids"].shape[0]

    def __getitems__(self, indices: list[int]) -> dict[str, Tensor]:
        index = torch.as_tensor(indices)
        return {key: value[index] for key, value in self.batch.items()}


def keep_batch(batch: Any) -> Any:
    return batch


def mse(output: Tensor, batch: tuple[Tensor, Tensor]) -> Tensor:
    return ((output - batch[1]) ** 2).mean()


def least_squares_problem(n: int = 500, d: int = 4, seed: int = 0) -> tuple[nn.Module, Tensor, Tensor]:
    """nn.Linear(d, 1) at the exact least-squares solution of noisy linear data (tests/measures/test_llc.py)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen)
    y = x @ torch.randn(d, 1, generator=gen) + 0.5 * torch.randn(n, 1, generator=gen)
    design = torch.cat([x, torch.ones(n, 1)], dim=1).double()
    solution = torch.linalg.lstsq(design, y.double()).solution
    model = nn.Linear(d, 1)
    with torch.no_grad():
        model.weight.copy_(solution[:d].T)
        model.bias.copy_(solution[d:, 0])
    return model, x, y


class Problem:
    """A model, a loader, a loss (for capgeo and for devinterp) and the SGLD settings."""

    def __init__(self, name: str, model: nn.Module, loader: DataLoader, loss_fn: Callable[[Any, Any], Tensor],
                 forward: Callable[[nn.Module, Any], Any], settings: dict[str, Any]) -> None:
        self.name, self.model, self.loader, self.loss_fn, self.forward = name, model, loader, loss_fn, forward
        self.settings = settings

    def ours(self, vectorize: bool | None = None) -> dict[str, Any]:
        s = self.settings
        return estimate_llc(self.model, self.loss_fn, self.loader, num_chains=s["chains"], num_draws=s["draws"],
                            lr=s["lr"], localization=s["gamma"], seed=0, forward=self.forward, vectorize=vectorize)

    def theirs(self) -> dict[str, Any]:
        from devinterp.slt.sampler import estimate_learning_coeff_with_summary

        s = self.settings
        with torch.random.fork_rng():  # devinterp seeds and draws from the global RNG
            return estimate_learning_coeff_with_summary(
                copy.deepcopy(self.model), self.loader,
                evaluate=lambda m, batch: self.loss_fn(self.forward(m, batch), batch),
                optimizer_kwargs={"lr": s["lr"], "localization": s["gamma"]},
                num_chains=s["chains"], num_draws=s["draws"], num_burnin_steps=0, seed=0, verbose=False,
            )

    def gradients_only(self) -> None:
        """The compute floor of any SGLD estimate: chains x draws loss gradients, one after another."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        with torch.random.fork_rng():  # a shuffling loader draws from the global RNG
            self._gradients(params)

    def _gradients(self, params: list[Tensor]) -> None:
        batches = iter(())
        for _ in range(self.settings["chains"] * self.settings["draws"]):
            batch = next(batches, None)
            if batch is None:
                batches = iter(self.loader)
                batch = next(batches)
            loss = self.loss_fn(self.forward(self.model, batch), batch)
            torch.autograd.grad(loss, params)


def lsq_problem(minibatch: bool, chains: int, draws: int) -> Problem:
    torch.manual_seed(0)
    model, x, y = least_squares_problem()
    loader = DataLoader(FastTensorDataset(x, y), batch_size=50 if minibatch else 500, shuffle=minibatch,
                        collate_fn=keep_batch)
    return Problem("lsq-minibatch" if minibatch else "lsq-full", model, loader, mse,
                   lambda m, batch: m(batch[0]), {"chains": chains, "draws": draws, "lr": 3e-4, "gamma": 10.0})


def transformer_problem(train_steps: int, chains: int, draws: int, task: str, difficulty: str) -> Problem:
    torch.manual_seed(0)
    datamodule = tasks.make_datamodule(task, difficulty, seed=0, batch_size=64)
    model = build_model("xs", datamodule.vocab_size, datamodule.seq_len)
    pretrain(model, datamodule, train_steps)  # away from initialisation, towards a minimum
    fixed = datamodule.to_batch(datamodule.train_sequences(10**6, batch_size=4 * 128))  # LLCMonitor: 4 x 128
    loader = DataLoader(DictDataset(fixed), batch_size=128, shuffle=False, collate_fn=keep_batch)

    def loss_fn(logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return answer_loss(logits, batch["targets"], batch["answer_mask"])

    return Problem("transformer", model, loader, loss_fn, lambda m, batch: m(batch["input_ids"]),
                   {"chains": chains, "draws": draws, "lr": 1e-4, "gamma": 100.0})


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=PROBLEMS)
    add_timing_args(parser)
    parser.add_argument("--lsq-chains", type=int, default=8)
    parser.add_argument("--lsq-draws", type=int, default=500)
    parser.add_argument("--chains", type=int, default=4, help="chains of the transformer problem")
    parser.add_argument("--draws", type=int, default=50,
                        help="draws of the transformer problem (LLCMonitor's default is 200; same time per draw)")
    parser.add_argument("--train-steps", type=int, default=300, help="training steps before the transformer LLC")
    parser.add_argument("--task", default="mod")
    parser.add_argument("--difficulty", default="hard")
    args = parser.parse_args(argv)
    clock = apply_timing_args(args)
    warnings.filterwarnings("ignore", module="devinterp")
    warnings.filterwarnings("ignore", ".*estimate_llc.*", RuntimeWarning)
    logging.getLogger("devinterp").setLevel(logging.ERROR)

    print(f"estimate_llc vs devinterp estimate_learning_coeff_with_summary; {args.threads} thread(s), "
          f"{args.repeats} repeats, medians of {clock} time")
    results = []
    for name in args.problems:
        if name == "transformer":
            problem = transformer_problem(args.train_steps, args.chains, args.draws, args.task, args.difficulty)
        else:
            problem = lsq_problem(name == "lsq-minibatch", args.lsq_chains, args.lsq_draws)
        estimates: dict[str, dict[str, Any]] = {}
        default_vmap = sum(p.numel() for p in problem.model.parameters() if p.requires_grad) <= VMAP_MAX_PARAMETERS

        def run(which: str, problem: Problem = problem, estimates: dict = estimates,
                default_vmap: bool = default_vmap) -> None:
            if which == "devinterp":
                estimates[which] = problem.theirs()
            else:
                estimates[which] = problem.ours(vectorize=None if which == "capgeo" else not default_vmap)

        candidates = {"capgeo": lambda run=run: run("capgeo"), "devinterp": lambda run=run: run("devinterp"),
                      "capgeo-other": lambda run=run: run("capgeo-other"), "gradients": problem.gradients_only}
        times = interleaved(candidates, args.repeats, clock=clock)
        ours, theirs = estimates["capgeo"], estimates["devinterp"]
        chains = problem.settings["chains"]
        ours_mean, ours_std = ours["llc_mean"], ours["llc_std"]
        theirs_mean, theirs_std = float(theirs["llc/mean"]), float(theirs["llc/std"])
        std_error = math.sqrt((ours_std**2 + theirs_std**2) / chains)
        z = (ours_mean - theirs_mean) / std_error if std_error > 0 else math.inf
        ratio = median(times["devinterp"]) / median(times["capgeo"])
        ratio_other = median(times["devinterp"]) / median(times["capgeo-other"])
        other_mean, other_std = estimates["capgeo-other"]["llc_mean"], estimates["capgeo-other"]["llc_std"]
        paths = ("sequential", "vmap") if ours["vectorized"] else ("vmap", "sequential")
        s = problem.settings
        print(f"{name}: {chains} chains x {s['draws']} draws, eps {s['lr']:g}, gamma {s['gamma']:g}, "
              f"nbeta {ours['nbeta']:.2f}, batch {problem.loader.batch_size}")
        print(f"  capgeo     LLC {ours_mean:9.4f} +- {ours_std:.4f}   time {fmt_times(times['capgeo'], 1.0)} s"
              f"  (default: {paths[1]})")
        print(f"  devinterp  LLC {theirs_mean:9.4f} +- {theirs_std:.4f}   time {fmt_times(times['devinterp'], 1.0)} s")
        print(f"  capgeo alt LLC {other_mean:9.4f} +- {other_std:.4f}   time {fmt_times(times['capgeo-other'], 1.0)} s"
              f"  ({paths[0]}, forced)")
        print(f"  floor: {chains * s['draws']} loss gradients one by one, time {fmt_times(times['gradients'], 1.0)} s")
        print(f"  difference {ours_mean - theirs_mean:+.4f} = {z:+.2f} standard errors; "
              f"time ratio devinterp / capgeo: {ratio:.2f}x ({paths[0]} forced: {ratio_other:.2f}x)")
        results.append({"problem": name, "capgeo": (ours_mean, ours_std), "devinterp": (theirs_mean, theirs_std),
                        "z": z, "ratio": ratio, "ratio_other_path": ratio_other, "times": times,
                        "vectorized": ours["vectorized"]})
    return results


if __name__ == "__main__":
    main()
