"""Render docs/calibration/runs.md from explore.jsonl (lean runs) and train_runs.jsonl (train.py runs)."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _params(p: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in p.items())


def main() -> None:
    lines = [
        "# Calibration runs",
        "",
        "Every run made for the calibration (lean runs first, then train.py runs, each in order). All on this",
        "2-core machine, one thread (`OMP_NUM_THREADS=1`), with other work on the machine (see load), so wall",
        "times are for **one shared core**; CPU seconds are what one core of its own would take.",
        "",
        "`explore` = `docs/calibration/explore.py`: the exact training trajectory of `train.py` (same seeding,",
        "data, model, optimizer; checked: identical val/logprob at steps 24 and 48 of sort hard), evaluated on",
        "train.py's validation set every `eval` steps (a multiple of train.py's interval, max_steps/256), without",
        "Lightning or RankMe; its acquisition step is the first of 3 consecutive evaluations with val/acc >= 0.5,",
        "so it lies within one `eval` interval of train.py's. s/step = train seconds per step (evaluation",
        "excluded); eval s = seconds per evaluation. `train.py` rows: `--measures rankme`, the default 256",
        "evaluations, s/step = wall seconds / steps run (evaluations and start-up included). CPU s: the process's",
        "CPU time (explore: of its training loop; train.py: the whole process), which does not grow when other",
        "processes share the core; load: the 1-minute load average at the start and end of the run (2 cores: a",
        "load above 2 means the run shared its core with someone else's process for part of the time).",
        "",
        "| # | tool | task | level | parameters | seed | max_steps | batch | lr | acquisition | steps run "
        "| final acc (max) | wall s | CPU s | load | s/step | eval s | note |",
        "| ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: | --- "
        "| ---: | ---: | --- |",
    ]
    rows = [("explore", r) for r in _rows(HERE / "explore.jsonl")] + [
        ("train.py", r) for r in _rows(HERE / "train_runs.jsonl")
    ]
    for i, (tool, r) in enumerate(rows, 1):
        acq = r.get("acquisition_step")
        acq_cell = f"**{acq}** ({acq / r['max_steps']:.0%})" if acq else "not acquired"
        final = r.get("final_acc")
        fin = "" if final is None else f"{final:.3f}"
        if "max_acc" in r:
            fin += f" ({r['max_acc']:.3f})"
        if tool == "explore":
            sps, ev = r["train_s_per_step"], r["eval_s_each"]
            tool_cell = f"explore (eval {r['eval_interval']})"
        else:
            sps, ev = r["s_per_step"], ""
            tool_cell = "train.py"
        note = r.get("tag", "") or (r.get("verdict") or "")
        cpu = r.get("cpu_seconds", r.get("cpu_seconds_process"))
        cpu_cell = "" if cpu is None else f"{cpu:.0f}"
        load = r.get("load_avg_start_end")
        load_cell = "" if not load else f"{load[0]:.1f}-{load[1]:.1f}"
        lines.append(
            f"| {i} | {tool_cell} | {r['task']} | {r['difficulty']} | {_params(r['params'])} | {r['seed']} "
            f"| {r['max_steps']} | {r['batch_size']} | {r['lr']:g} | {acq_cell} | {r['steps_run']} | {fin} "
            f"| {r['wall_seconds']:.0f} | {cpu_cell} | {load_cell} | {sps} | {ev} | {note} |"
        )
    (HERE / "runs.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
