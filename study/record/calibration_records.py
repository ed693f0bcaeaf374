"""The first version's calibration records, rendered: what docs/calibration/ keeps of the runs made on a 2-core CPU.

    python -m study.record.calibration_records runs      # -> docs/calibration/runs.md, every recorded run
    python -m study.record.calibration_records levels    # per level: its present setting and the recorded runs at it

The records are ``docs/calibration/explore.jsonl`` (lean runs: train.py's training trajectory, evaluated on its
validation set every few evaluation intervals, without Lightning or the measures) and ``train_runs.jsonl``
(whole ``train.py`` runs). The scripts that made them are gone (they called train.py flags that no longer
exist); a run is redone with ``train.py --task-params ... --stop-when-learned`` or ``python -m
study.phases.calibration run``, which calibrates the hard levels now.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from study.checkout import ROOT
from tasks.budgets import budget
from tasks.params import DIFFICULTIES, TASKS, resolve_params
from tasks.space import format_count, question_space

FOLDER = ROOT / "docs" / "calibration"
RECORDS = {"explore": FOLDER / "explore.jsonl", "train.py": FOLDER / "train_runs.jsonl"}

RUNS_HEADER = [
    "# Calibration runs",
    "",
    "Every run made for the calibration (lean runs first, then train.py runs, each in order). All on this",
    "2-core machine, one thread (`OMP_NUM_THREADS=1`), with other work on the machine (see load), so wall",
    "times are for **one shared core**; CPU seconds are what one core of its own would take.",
    "",
    "`explore` = the first version's `docs/calibration/explore.py`: the exact training trajectory of `train.py` (same",
    "seeding, data, model, optimizer; checked: identical val/logprob at steps 24 and 48 of sort hard), evaluated on",
    "train.py's validation set every `eval` steps (a multiple of train.py's interval, max_steps/256), without",
    "Lightning or RankMe; its acquisition step is the first of 3 consecutive evaluations with val/acc >= 0.5,",
    "so it lies within one `eval` interval of train.py's. s/step = train seconds per step (evaluation",
    "excluded); eval s = seconds per evaluation. `train.py` rows: `--measures rankme`, the default 256",
    "evaluations, s/step = wall seconds / steps run (evaluations and start-up included). CPU s: the process's",
    "CPU time (explore: of its training loop; train.py: the whole process), which does not grow when other",
    "processes share the core; load: the 1-minute load average at the start and end of the run (2 cores: a",
    "load above 2 means the run shared its core with someone else's process for part of the time).",
    "Rendered by `python -m study.record.calibration_records runs`.",
    "",
    "| # | tool | task | level | parameters | seed | max_steps | batch | lr | acquisition | steps run "
    "| final acc (max) | wall s | CPU s | load | s/step | eval s | note |",
    "| ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: | --- "
    "| ---: | ---: | --- |",
]


def records() -> list[tuple[str, dict[str, Any]]]:
    """``(tool, record)`` of every recorded run: lean runs first, then train.py runs, each in order."""
    found = []
    for tool, path in RECORDS.items():
        lines = path.read_text().splitlines() if path.exists() else []
        found += [(tool, json.loads(line)) for line in lines if line.strip()]
    return found


def _params(p: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in p.items())


def runs_markdown(rows: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """docs/calibration/runs.md: one line per recorded run."""
    lines = list(RUNS_HEADER)
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
    return "\n".join(lines) + "\n"


def levels_markdown(rows: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """Per level: its present parameters, budget and question space, and the recorded runs made at exactly
    that setting."""
    lines = ["| task | level | parameters | budget | questions "
             "| runs at this setting (seed: acquisition (fraction), CPU s) |",
             "| --- | --- | --- | --- | ---: | --- |"]
    for task in TASKS:
        for d in DIFFICULTIES:
            p, b = resolve_params(task, d), budget(task, d)
            cells = []
            for tool, r in rows:
                if (r["task"], r["difficulty"], r["params"], r["max_steps"], r["batch_size"], r["lr"]) != (
                        task, d, p, b.max_steps, b.batch_size, b.lr):
                    continue
                acq = r.get("acquisition_step")
                cpu = r.get("cpu_seconds", r.get("cpu_seconds_process"))
                what = (f"{acq} ({acq / b.max_steps:.0%})" if acq
                        else f"none in {r['steps_run']} (acc {r['final_acc']:.2f})")
                cells.append(f"s{r['seed']}: {what}" + (f", {cpu:.0f} s" if cpu else "")
                             + (" [train.py]" if tool == "train.py" else ""))
            bud = f"{b.max_steps}, batch {b.batch_size}, lr {b.lr:g}"
            bud += " (negative control)" if b.negative_control else ""
            space = format_count(question_space(task, p))
            lines.append(f"| {task} | {d} | {_params(p)} | {bud} | {space} | {'; '.join(cells) or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m study.record.calibration_records",
                                     description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("runs", help="write docs/calibration/runs.md from the records")
    commands.add_parser("levels", help="print each level's present setting beside the recorded runs at it")
    args = parser.parse_args(argv)
    if args.command == "runs":
        path = FOLDER / "runs.md"
        path.write_text(runs_markdown(records()))
        print(f"wrote {path}")
    else:
        print(levels_markdown(records()), end="")


if __name__ == "__main__":
    main()
