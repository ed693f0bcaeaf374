"""The registered tasks' calibration seeds again, on the held-out runs' hardware, each to the end of its budget.

    python -m study.phases.corpus run --phases calibration-cpu --workers 2   # the 18 runs (a clean tree only)
    python -m study.phases.corpus export                             # -> study/corpus/calibration-cpu/<run>.json.gz
    python -m study.phases.calibration_cpu report                            # -> docs/calibration/cpu.md
    python -m study.phases.calibration_cpu window                            # the fall-back count (docs/design.md)

The registered clock and the calibrated thresholds were fitted on calibration runs made on an H200 machine
(torch 2.11.0+cu130); the held-out runs were made on a 2-core CPU, one thread. Acquisition moves with the
hardware and the thread count (docs/main-command/parity.md), so the clock is recomputed here from the same seeds
(0-2) of the same tasks and levels run on that CPU, and the held-out report shows the comparators fitted both ways
(the registered ones kept as registered).

These runs are also whole: no ``--stop-when-learned``. A run stopped that way keeps only ``--evals-after-learned``
evaluations after 0.9 has held, so a later fall-back cannot be seen. Counted here: the runs that are acquired fully
on the record such a stop would have kept, and fall back later in the whole run. The window is then the smallest
that would have seen every fall-back these runs show (the window stays as it is when none falls back late);
train.py's default (``EVALS_AFTER_LEARNED``) is that window, and every phase that stops when learned uses it.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capgeo_callbacks.detection import DetectionSettings, label_run
from capgeo_callbacks.scoring import Rate, ScoredRun, load_runs
from study.checkout import ROOT
from study.phases.corpus import CORPUS, phase_jobs

PHASE = "calibration-cpu"
FOLDER = CORPUS / PHASE
DOC = ROOT / "docs" / "calibration" / "cpu.md"
WINDOW_TESTED = 8  # the evaluations kept after 0.9 has held by every phase before this count (train.py's default)
REFIT = ("clock", "logprob-threshold-calibrated")  # the registered comparators fitted on calibration runs


@functools.cache
def cpu_runs(folder: Path = FOLDER) -> tuple[ScoredRun, ...]:
    return tuple(load_runs(folder))


def missing(folder: Path = FOLDER) -> list[str]:
    """The phase's runs not yet in the corpus."""
    return [job.name for job in phase_jobs(PHASE) if not (folder / f"{job.name}.json.gz").exists()]


def refitted(runs: Sequence[ScoredRun]) -> dict[str, Any]:
    """The registered comparators that are fitted on calibration runs, fitted again on ``runs`` (by the same
    code as the registered ones: ``study.registrations.forecast.FORECASTERS``), each named
    ``<name> (CPU calibration)``."""
    from study.registrations.forecast import FORECASTERS

    fitted = {}
    for name in REFIT:
        rule = FORECASTERS[name](list(runs))
        rule.name = f"{name} (CPU calibration)"
        fitted[name] = rule
    return fitted


def clock_table(registered: dict[str, list[float]], cpu: dict[str, list[float]]) -> str:
    """Per task: the acquisition steps of the calibration seeds on each machine and the clock's median."""
    lines = ["| task | GPU machine (registered): acquisition steps | median | CPU, one thread: acquisition steps | "
             "median | CPU / GPU |", "| --- | --- | ---: | --- | ---: | ---: |"]
    for key in sorted(set(registered) | set(cpu)):
        gpu_steps, cpu_steps = registered.get(key, []), cpu.get(key, [])
        gpu_median = statistics.median(gpu_steps) if gpu_steps else None
        cpu_median = statistics.median(cpu_steps) if cpu_steps else None
        ratio = f"{cpu_median / gpu_median:.2f}" if gpu_median and cpu_median else "-"
        lines.append(f"| {key} | {_steps(gpu_steps)} | {_num(gpu_median)} | {_steps(cpu_steps)} | {_num(cpu_median)} "
                     f"| {ratio} |")
    return "\n".join(lines)


def _steps(steps: Sequence[float]) -> str:
    return ", ".join(f"{step:.0f}" for step in steps) or "none acquired"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


@dataclass(frozen=True)
class FallBack:
    """One whole run, read as ``--stop-when-learned`` would have kept it and as it was.

    Attributes:
        name: the run.
        full_step: the first step holding 0.9 (None: never held).
        kept_until: the last step a stop ``window`` evaluations after 0.9 held would have kept.
        fully_when_stopped: acquired fully on that shortened record.
        fallback_step: the first step of a fall-back in the whole run (None: none).
        evaluations_after: evaluations from 0.9's confirmation to the fall-back's (None: no fall-back after it).
    """

    name: str
    full_step: int | None
    kept_until: int | None
    fully_when_stopped: bool
    fallback_step: int | None
    evaluations_after: int | None

    @property
    def late(self) -> bool:
        """Acquired fully on the shortened record, fallen back in the whole run."""
        return self.fully_when_stopped and self.fallback_step is not None


def fallback(run: ScoredRun, window: int = WINDOW_TESTED) -> FallBack:
    steps, acc = list(run.view.steps), list(run.view.values("acc"))
    settings = DetectionSettings.from_dict(run.summary.get("settings") or {})
    whole = label_run(steps, acc, settings)
    name = Path(run.name).name.removesuffix(".json.gz")
    if whole.full_step is None:
        return FallBack(name, None, None, False, whole.fallback_step, None)
    confirmed = steps.index(whole.full_step) + settings.patience - 1
    end = min(len(steps) - 1, confirmed + window)
    kept = label_run(steps[:end + 1], acc[:end + 1], settings)
    after = None
    if whole.fallback_step is not None and whole.fallback_step > whole.full_step:
        after = steps.index(whole.fallback_step) + settings.patience - 1 - confirmed
    return FallBack(name, whole.full_step, steps[end], kept.acquired_fully, whole.fallback_step, after)


def window(runs: Sequence[ScoredRun], tested: int = WINDOW_TESTED) -> int:
    """The evaluations to keep after 0.9 has held: the smallest number that would have seen every late fall-back
    of ``runs`` (``tested`` when none falls back late)."""
    late = [found.evaluations_after for run in runs if (found := fallback(run, tested)).late]
    return max([tested, *[after for after in late if after is not None]])


def window_text(runs: Sequence[ScoredRun] | None = None) -> str:
    """The fall-back count and the window it fixes (docs/design.md, "Labels")."""
    runs = cpu_runs() if runs is None else runs
    found = [fallback(run) for run in runs]
    stopped = [f for f in found if f.fully_when_stopped]
    late = [f for f in stopped if f.late]
    rate = Rate(len(late), len(stopped))
    chosen = window(runs)
    left = missing()
    text = (f"Counted on the whole runs of `study/corpus/{PHASE}/` (the registered tasks, hard, seeds 0-2, on this "
            "CPU, "
            f"one thread, to the end of the budget; {len(runs)} of {len(runs) + len(left)} runs"
            + (f", {len(left)} not yet run" if left else "") + f"): {len(stopped)} would have been labelled acquired "
            f"fully by a run stopped {WINDOW_TESTED} evaluations after 0.9 had held, and {rate} of them fell back "
            "later in the whole run")
    if late:
        text += " (" + "; ".join(f"{f.name}: fall-back from step {f.fallback_step}, confirmed {f.evaluations_after} "
                                 "evaluations after 0.9 held" for f in late) + ")"
    if chosen == WINDOW_TESTED:
        text += (f". The window stays {chosen} evaluations (`train.py --evals-after-learned`, every phase that stops "
                 f"when learned); a later fall-back is not ruled out: it may come in up to {rate.interval[1]:.0%} of "
                 "runs (Wilson 95% upper bound)." if rate.n else
                 f". No run held 0.9 yet: the window stays {chosen} evaluations, untested.")
    else:
        text += (f". The window becomes {chosen} evaluations (`train.py --evals-after-learned`, every phase that "
                 "stops when learned from now on): the smallest that would have seen every one of them.")
    return text


def fallback_table(runs: Sequence[ScoredRun]) -> str:
    lines = ["| run | acquisition (0.5) | holds 0.9 from | a stop 8 evaluations later keeps until | acquired fully "
             "there | whole run: fall-back from | whole run: acquired fully |",
             "| --- | ---: | ---: | ---: | --- | ---: | --- |"]
    for run in runs:
        f = fallback(run)
        lines.append(f"| {f.name} | {run.acquisition or '-'} | {f.full_step or '-'} | {f.kept_until or '-'} | "
                     f"{'yes' if f.fully_when_stopped else 'no'} | {f.fallback_step or '-'} | "
                     f"{'yes' if run.acquired_fully else 'no'} |")
    return "\n".join(lines)


def calibration_table(runs: Sequence[ScoredRun]) -> str:
    """Each task's seeds on this CPU beside the same seeds on the GPU machine (``study/corpus/hard``), and the
    calibration rule's verdict on each machine (docs/design.md, "Labels")."""
    from study.phases.calibration import Variant, verdict
    from tasks.budgets import budget

    by_task: dict[str, list[ScoredRun]] = {}
    for run in runs:
        by_task.setdefault(run.summary["task"], []).append(run)
    gpu = {Path(run.name).name: run for run in load_runs(CORPUS / "hard")}
    lines = ["| task | seed | GPU: acquisition | GPU: holds 0.9 | GPU: fully, late | CPU: acquisition | CPU: holds 0.9 "
             "| CPU: fully, late | verdict on the GPU machine | verdict on this CPU |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: | --- | --- | --- |"]
    for task, found in sorted(by_task.items()):
        variant = Variant(task, budget(task, "hard").max_steps)
        twins = [gpu.get(f"{Path(run.name).name}") for run in found]
        on_gpu = verdict(variant, [t.summary for t in twins if t is not None])
        on_cpu = verdict(variant, [run.summary for run in found])
        for run, twin in zip(found, twins, strict=True):
            lines.append(f"| {task} | {run.seed} | {_labels(twin)} | {_labels(run)} | {on_gpu} | {on_cpu} |")
    return "\n".join(lines)


def _labels(run: ScoredRun | None) -> str:
    if run is None:
        return "- | - | -"
    labels = run.summary.get("labels") or {}
    fully = "yes" if labels.get("acquired_fully") else "no"
    late = "-" if labels.get("late") is None else ("yes" if labels["late"] else "no")
    return f"{run.acquisition or '-'} | {labels.get('full_step') or '-'} | {fully}, {late}"


def report(registration: Path | None = None) -> str:
    """docs/calibration/cpu.md."""
    from study.phases.corpus import label_rows, provenance_table
    from study.registrations.forecast import REGISTRATION

    frozen = json.loads((registration or REGISTRATION).read_text())
    runs = cpu_runs()
    left = missing()
    rows = [row for row in label_rows() if row["phase"] == PHASE]
    lines = ["# The registered tasks' calibration seeds on the held-out runs' hardware", "",
             f"Generated by `python -m study.phases.calibration_cpu report` from `study/corpus/{PHASE}/` "
             f"({len(runs)} of {len(runs) + len(left)} runs" + (f"; not yet run: {', '.join(left)}" if left else "")
             + ") and `study/corpus/hard/` (the same seeds on the GPU machine, the runs the registration was fitted "
             "on). "
             "Why, and what the count of fall-backs decides: `study/phases/calibration_cpu.py`.", ""]
    if not runs:
        return "\n".join(lines + ["No run yet."]) + "\n"
    gpu_clock = frozen["compared_with"]["forecasters"]["clock"]["settings"]["table"]
    cpu_clock = refitted(runs)["clock"].settings()["table"]
    lines += ["## Where they ran", "", provenance_table(rows), "",
              "## The calibration, on each machine", "", calibration_table(runs), "",
              "## The clock, on each machine", "",
              "The clock forecasts a run's acquisition at the median acquisition step of its task's calibration "
              "seeds (registered: `study/registration.json`, `compared_with.forecasters.clock`).", "",
              clock_table(gpu_clock, cpu_clock), "",
              "The held-out scores with the comparators fitted both ways: [heldout.md](../heldout.md).", "",
              "## Falling back after 0.9", "", window_text(runs), "", fallback_table(runs)]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("report", help="the CPU calibration beside the GPU one -> docs/calibration/cpu.md")
    commands.add_parser("window", help="the fall-back count and the window it fixes")
    args = parser.parse_args(argv)
    if args.command == "window":
        print(window_text())
        return
    DOC.write_text(report())
    print(DOC.read_text())


if __name__ == "__main__":
    main()
