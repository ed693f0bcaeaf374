"""Lean calibration runs: the training trajectory of ``train.py``, without Lightning or the measures.

    OMP_NUM_THREADS=1 python docs/calibration/explore.py --task sort --difficulty hard --seed 0 \
        --params '{"length": 24}' --max-steps 3000 --eval-every 4 --stop-after-acquisition

It seeds, builds the datamodule (with train.py's validation size), the model and the optimizer
exactly as ``train.py`` does, so the weights after step k are those of ``train.py`` with the same
arguments; only the evaluation differs: every ``--eval-every`` validation intervals of train.py
(``ceil(max_steps / 256)`` steps), exact-match accuracy on the validation set, nothing else. The
acquisition step (first of 3 consecutive evaluations with val/acc >= 0.5) therefore lies within one
evaluation interval of the one train.py would report at ``--eval-every 1``.

Task parameters can be overridden with ``--params`` (JSON), which train.py cannot do. Every run
appends one JSON line to docs/calibration/explore.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import lightning.pytorch as pl
import torch

# CAPGEO_ROOT: run against another copy of the code (a snapshot of the committed tree, with tasks/ synced),
# so that edits in progress elsewhere in the working tree cannot break a run.
ROOT = Path(os.environ.get("CAPGEO_ROOT", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(ROOT))

import train  # noqa: E402
from models import CapabilityModule  # noqa: E402
from models.lightning_module import answer_loss, answer_metrics  # noqa: E402
from tasks import make_datamodule  # noqa: E402
from tasks.budgets import budget  # noqa: E402

LOG = Path(__file__).with_name("explore.jsonl")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--task", required=True)
    p.add_argument("--difficulty", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--params", default="{}")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--size", default=None)
    p.add_argument("--eval-every", type=int, default=4, help="in train.py validation intervals")
    p.add_argument("--stop-after-acquisition", action="store_true")
    p.add_argument("--time-limit", type=float, default=1e9, help="stop after this many seconds")
    p.add_argument("--tag", default="")
    a = p.parse_args()
    torch.set_num_threads(1)
    params = json.loads(a.params)
    b = budget(a.task, a.difficulty)
    max_steps = a.max_steps or b.max_steps
    batch_size = a.batch_size or b.batch_size
    lr = a.lr or b.lr
    size = a.size or b.size
    warmup = min(b.warmup_steps, max(1, max_steps // 10))
    interval = train.validation_interval(max_steps) * a.eval_every

    pl.seed_everything(a.seed, workers=True, verbose=False)
    val_size = train.MIN_VAL_EXAMPLES  # train.py's validation set
    dm = make_datamodule(a.task, a.difficulty, seed=a.seed, batch_size=batch_size, val_size=val_size,
                         test_size=val_size, eval_batch_size=1024, params=params)
    module = CapabilityModule(size=size, vocab_size=dm.vocab_size, max_seq_len=dm.seq_len, lr=lr,
                              weight_decay=b.weight_decay, warmup_steps=warmup, max_steps=max_steps)
    conf = module.configure_optimizers()
    opt, sched = conf["optimizer"], conf["lr_scheduler"]["scheduler"]
    val = dm.eval_batch("val")

    def evaluate() -> tuple[float, float]:
        module.eval()
        accs, lps = [], []
        with torch.no_grad():
            for i in range(0, val["input_ids"].shape[0], 1024):
                logits = module(val["input_ids"][i:i + 1024])
                m = answer_metrics(logits, val["targets"][i:i + 1024], val["answer_mask"][i:i + 1024])
                n = logits.shape[0]
                accs.append(float(m["acc"]) * n)
                lps.append(float(m["logprob"]) * n)
        module.train()
        total = val["input_ids"].shape[0]
        return sum(accs) / total, sum(lps) / total

    stop = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(flag=True))  # kill PID: stop and record
    steps, accs, lps = [], [], []
    acquired, run, t_train, t_eval = None, 0, 0.0, 0.0
    started, cpu_started = time.perf_counter(), time.process_time()
    load_start = os.getloadavg()[0]
    module.train()
    k = 0
    for k in range(max_steps):
        t0 = time.perf_counter()
        batch = dm.train_batch(k)
        loss = answer_loss(module(batch["input_ids"]), batch["targets"], batch["answer_mask"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        t_train += time.perf_counter() - t0
        if (k + 1) % interval == 0 or k + 1 == max_steps:
            t0 = time.perf_counter()
            acc, lp = evaluate()
            t_eval += time.perf_counter() - t0
            steps.append(k + 1)
            accs.append(round(acc, 4))
            lps.append(round(lp, 4))
            run = run + 1 if acc >= 0.5 else 0
            if run == 3 and acquired is None:
                acquired = steps[-3]
            print(f"step {k + 1} acc {acc:.4f} logprob {lp:.3f} loss {float(loss):.3f} "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)
            if acquired is not None and a.stop_after_acquisition:
                break
            if time.perf_counter() - started > a.time_limit or stop["flag"]:
                break
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    rec = {
        "task": a.task, "difficulty": a.difficulty, "params": dm.params, "seed": a.seed, "size": size,
        "max_steps": max_steps, "batch_size": batch_size, "lr": lr, "seq_len": dm.seq_len, "val_size": val_size,
        "eval_interval": interval, "acquisition_step": acquired, "steps_run": k + 1, "final_acc": accs[-1],
        "max_acc": max(accs), "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
        "load_avg_start_end": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "train_s_per_step": round(t_train / (k + 1), 4), "eval_s_each": round(t_eval / max(1, len(steps)), 3),
        "tag": a.tag + (" (stopped by hand)" if stop["flag"] else ""), "steps": steps, "acc": accs, "logprob": lps,
    }
    with LOG.open("a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps({k2: v for k2, v in rec.items() if k2 not in ("steps", "acc", "logprob")}))


if __name__ == "__main__":
    main()
