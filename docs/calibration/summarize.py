"""Per level: current parameters and budget, question space, and the runs made at exactly that setting."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, os.environ.get("CAPGEO_ROOT", str(HERE.parents[1])))

from tasks.budgets import budget  # noqa: E402
from tasks.params import DIFFICULTIES, TASKS, resolve_params  # noqa: E402
from tasks.space import format_count, question_space  # noqa: E402


def _rows(name: str) -> list[dict]:
    path = HERE / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def main() -> None:
    runs = [("explore", r) for r in _rows("explore.jsonl")] + [("train.py", r) for r in _rows("train_runs.jsonl")]
    print("| task | level | parameters | budget | questions "
          "| runs at this setting (seed: acquisition (fraction), CPU s) |")
    print("| --- | --- | --- | --- | ---: | --- |")
    for task in TASKS:
        for d in DIFFICULTIES:
            p, b = resolve_params(task, d), budget(task, d)
            cells = []
            for tool, r in runs:
                if (r["task"], r["difficulty"], r["params"], r["max_steps"], r["batch_size"], r["lr"]) != (
                    task, d, p, b.max_steps, b.batch_size, b.lr
                ):
                    continue
                acq = r.get("acquisition_step")
                cpu = r.get("cpu_seconds", r.get("cpu_seconds_process"))
                what = (f"{acq} ({acq / b.max_steps:.0%})" if acq
                        else f"none in {r['steps_run']} (acc {r['final_acc']:.2f})")
                cells.append(f"s{r['seed']}: {what}" + (f", {cpu:.0f} s" if cpu else "")
                             + (" [train.py]" if tool == "train.py" else ""))
            params = ", ".join(f"{k}={v}" for k, v in p.items())
            bud = f"{b.max_steps}, batch {b.batch_size}, lr {b.lr:g}"
            bud += " (negative control)" if b.negative_control else ""
            space = format_count(question_space(task, p))
            print(f"| {task} | {d} | {params} | {bud} | {space} | {'; '.join(cells) or '-'} |")


if __name__ == "__main__":
    main()
