"""The forecast a user without calibration gets: capgeo's default forecaster (``acc-trend``, from the monitored
accuracy alone) beside what such a user would compare it with, on capgeo's corpus and on the gallery's runs.

    python -m study.record.user_forecast gallery   # the gallery examples once -> study/corpus/gallery/<example>.json.gz
    python -m study.record.user_forecast spread    # acc-trend's interval spread, from study/corpus/calibration
    python -m study.record.user_forecast report    # -> docs/user-forecast.md (with study/corpus/heldout, scored last)
    python -m study.record.user_forecast readme    # the README's "When" line: acc-trend on the registered runs

The default was chosen on ``study/corpus/calibration`` and the gallery's runs, and its interval spread
(:data:`~capgeo_callbacks.rules.trend.TREND_SPREAD`) read off ``study/corpus/calibration`` alone; the other sets are
reported as they come. Never on ``examples/new_tasks`` (the held-out test of issue 29).
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from capgeo_callbacks.rules import Forecast, Rule, make_rule, rule_output
from capgeo_callbacks.rules.trend import TrendForecaster
from capgeo_callbacks.run.summary import read_summary
from capgeo_callbacks.scoring import ScoredRun, forecast_scores, forecast_table, load_runs
from capgeo_callbacks.scoring.scores import Rate, error_text, scored_run
from examples import hugging_face_gpt2, lightning_demo_transformer, own_model, vision_encoder
from study.checkout import ROOT
from study.phases.corpus import CORPUS, made_on, unrecorded, write_packed

GALLERY = CORPUS / "gallery"
DOC = ROOT / "docs" / "user-forecast.md"
# the examples as their tests run them: (name, the example's main, its keyword arguments)
EXAMPLES = (("own_model", own_model.main, {}),
            ("lightning_demo_transformer", lightning_demo_transformer.main, {}),
            ("hugging_face_gpt2-lightning", hugging_face_gpt2.main, {"framework": "lightning"}),
            ("hugging_face_gpt2-transformers", hugging_face_gpt2.main, {"framework": "transformers"}),
            ("vision_encoder", vision_encoder.main, {}))
SETS = ("calibration", "ablation", "levels", "fresh", "controls")
FORECASTERS = ("acc-trend", "acc-last", "acc-linear", "curve-families", "loss-threshold")
SHARES = (0.25, 0.5, 0.75)


def run_gallery() -> list[Path]:
    """Each gallery example trained once as its test trains it; its summary packed into study/corpus/gallery, with
    where it ran and the CPU seconds it took (the examples' trainers choose their accelerator: the GPU where there is
    one)."""
    import torch

    written = []
    for name, main, options in EXAMPLES:
        with tempfile.TemporaryDirectory() as root:
            started = time.process_time()
            folder = main(root=root, **options)
            summary = {**read_summary(folder), "cpu_seconds": round(time.process_time() - started, 1),
                       "threads": torch.get_num_threads(),
                       **made_on("cuda:0" if torch.cuda.is_available() else "cpu")}
            written.append(write_packed(summary, GALLERY / f"{name}.json.gz"))
    return written


def gallery_runs() -> list[ScoredRun]:
    runs = []
    for path in sorted(GALLERY.glob("*.json.gz")):
        run = scored_run(read_summary(path), path.name.removesuffix(".json.gz"))
        if run is not None:
            runs.append(run)
    return runs


def acquired(runs: Sequence[ScoredRun]) -> list[ScoredRun]:
    return [run for run in runs if run.acquisition is not None and not run.control]


def forecast_at(rule: Rule, run: ScoredRun, share: float) -> Forecast | None:
    """``rule``'s forecast at the last evaluation at or before ``share`` of the run's time to acquisition."""
    end = sum(1 for step in run.view.steps if step <= share * run.acquisition)  # type: ignore[operator]
    return rule_output(rule, run.view.prefix(end), []).forecast if end else None


def log_ratios(rule: Rule, runs: Sequence[ScoredRun], shares: Sequence[float] = SHARES) -> list[float]:
    """log(actual / predicted time to acquisition) of ``rule``'s finite forecasts at ``shares`` of each acquired
    run's time to acquisition."""
    ratios = []
    for run in acquired(runs):
        for share in shares:
            made = forecast_at(rule, run, share)
            if made is not None and math.isfinite(made.predicted) and made.predicted > made.step:
                ratios.append(math.log((run.acquisition - made.step) / (made.predicted - made.step)))
    return ratios


def spread(folder: Path = CORPUS / "calibration") -> tuple[float, float, int]:
    """The 10th and 90th percentiles of acc-trend's log ratios (its point prediction alone) on ``folder``, rounded
    out to 0.1, and how many forecasts they come from."""
    ratios = log_ratios(TrendForecaster(spread=(0.0, 0.0), t=0.0), load_runs(folder))
    low, high = np.quantile(ratios, [0.1, 0.9])
    return math.floor(low * 10) / 10, math.ceil(high * 10) / 10, len(ratios)


def first_kept_promise(rule: Rule, run: ScoredRun, share: float = 0.75) -> Forecast | None:
    """The first forecast made at or before ``share`` of the time to acquisition with
    ``step < low <= predicted <= high`` and a finite prediction (issue 28's condition)."""
    for end in range(1, len(run.view.steps) + 1):
        if run.view.steps[end - 1] > share * run.acquisition:  # type: ignore[operator]
            break
        made = rule_output(rule, run.view.prefix(end), []).forecast
        if (made is not None and math.isfinite(made.predicted) and made.low is not None
                and made.step < made.low <= made.predicted <= (made.high if made.high is not None else math.inf)):
            return made
    return None


def condition_row(rule: Rule, runs: Sequence[ScoredRun]) -> str:
    """How many acquired runs got a forecast meeting issue 28's condition, and in how many its interval held the
    actual step; and on the runs that ran their whole budget without acquiring (controls included), how many got a
    finite forecast at some evaluation."""
    made = [(run, first_kept_promise(rule, run)) for run in acquired(runs)]
    met = [(run, f) for run, f in made if f is not None]
    held = sum(f.low <= run.acquisition <= (f.high if f.high is not None else math.inf) for run, f in met)
    never = [run for run in runs if run.acquisition is None and run.summary.get("steps", 0) >= (
        run.summary.get("max_steps") or 0)]  # a run stopped before its budget may have been about to acquire
    false = sum(any(f is not None and math.isfinite(f.predicted) for f in
                    (rule_output(rule, run.view.prefix(end), []).forecast for end in range(1, len(run.view.steps) + 1)))
                for run in never)
    return (f"| {rule.name} | {Rate(len(met), len(made))} | {Rate(held, len(met))} | "
            f"{Rate(false, len(never))} |")


def section(title: str, runs: Sequence[ScoredRun], rules: Sequence[Rule]) -> list[str]:
    lines = [f"### {title}: {len(runs)} runs, {len(acquired(runs))} acquired, "
             f"{sum(r.control for r in runs)} controls, {sum(r.acquisition is None and not r.control for r in runs)} "
             "never acquired", ""]
    if acquired(runs):
        lines += [forecast_table([forecast_scores(rule, runs, fractions=(0.1, *SHARES)) for rule in rules]), ""]
    lines += ["| forecaster | a forecast at or before 75% with step < low <= predicted <= high | ... whose interval "
              "holds the actual step | never acquired in the whole budget: a finite forecast made |",
              "| --- | --- | --- | --- |"]
    lines += [condition_row(rule, runs) for rule in rules]
    return [*lines, ""]


def gallery_lines(runs: Sequence[ScoredRun]) -> list[str]:
    rule = TrendForecaster()
    lines = ["| example | acquisition | evaluations before it | acc-trend's first forecast meeting the condition "
             "(step: predicted [low, high]) | holds the actual step |", "| --- | --- | --- | --- | --- |"]
    for run in acquired(runs):
        made = first_kept_promise(rule, run)
        before = sum(step < run.acquisition for step in run.view.steps)  # type: ignore[operator]
        if made is None:
            shown, holds = "none", "-"
        else:
            high = math.inf if made.high is None else made.high
            shown = f"step {made.step}: {made.predicted:.0f} [{made.low:.0f}, {high:.0f}]"
            holds = "yes" if made.low <= run.acquisition <= high else "**no**"
        lines.append(f"| {run.name} | {run.acquisition} | {before} | {shown} | {holds} |")
    return lines


def gallery_provenance() -> str:
    """What the gallery's summaries record of where they ran (``python -m study.user_forecast gallery`` adds it)."""
    found = unrecorded({path.name.removesuffix(".json.gz"): read_summary(path)
                        for path in sorted(GALLERY.glob("*.json.gz"))})
    if found.startswith("Not recorded"):
        found += (" These runs were made before the gallery command recorded where a run ran and its CPU time; they "
                  "are not rerun to carry it, because the default forecast was chosen on them: a rerun would replace "
                  "the runs a frozen choice stands on.")
    return found


def report() -> str:
    rules = [make_rule(name) for name in FORECASTERS]
    low, high, count = spread()
    lines = ["# The forecast without calibration", "",
             "Generated by `python -m study.record.user_forecast report`. What a user who logs `val/acc` "
             "(and `val/loss`) gets as a forecast of the acquisition step (accuracy >= 0.5, held), with no "
             "calibration clock, chance table or answer length: capgeo's default `acc-trend` "
             "(`capgeo_callbacks.rules.TrendForecaster`), beside persistence (`acc-last`), a straight line through "
             "the accuracy (`acc-linear`), Domhan et al.'s curve families (`curve-families`) and the loss extrapolated "
             "to `-log(0.5)` per token (`loss-threshold`, Du et al.'s threshold without calibration).", "",
             "Chosen on `study/corpus/calibration` and the gallery's runs (`study/corpus/gallery`, "
             "`python -m study.record.user_forecast gallery`); the interval's spread read off "
             "`study/corpus/calibration` alone "
             f"(`python -m study.record.user_forecast spread`: [{low}, {high}] from {count} forecasts; the library's "
             f"`TREND_SPREAD` is {tuple(TrendForecaster().spread)}). The other corpus sets were not looked at "
             "while choosing; `study/corpus/heldout` once, after the choice was frozen (below). Error: "
             "|predicted - actual| / actual at a share of each acquired run's time to acquisition; 'none' where it "
             "made no forecast there (a missing "
             "forecast counts as an infinite error in the median).", "",
             "## The gallery", "", *gallery_lines(gallery_runs()), "", gallery_provenance(), "",
             "## By set", "", *section("gallery", gallery_runs(), rules)]
    for name in SETS:
        lines += section(f"study/corpus/{name}", load_runs(CORPUS / name), rules)
    return "\n".join([*lines, heldout()]) + "\n"


def page() -> str:
    """docs/user-forecast.md, as :mod:`study.record.summary` regenerates it."""
    return report()


def heldout_runs() -> list[ScoredRun]:
    return [run for run in load_runs(CORPUS / "heldout") if (run.seed or 0) >= 100]


def readme_sentence() -> str:
    """The README's "When" line: the default forecast (acc-trend) at half the time to acquisition on both registered
    phases' held-out runs, with how many got no forecast and how often its interval held the step, beside the
    registered clock at the same point (from the same figures as docs/who-learns.md and docs/grokking.md)."""
    from study.record import grokking_report, who_learns_report

    learn = {entry["rule"]: (entry["fractions"]["0.5"], entry["fractions"]["0.5"]["coverage"])
             for entry in who_learns_report.figures().forecasts}
    grok = {row["name"]: (row["entry"], row["coverage"]) for row in grokking_report.figures().forecasts}
    parts = []
    for name, found, where in (("who will learn", learn, "docs/who-learns.md"), ("grokking", grok,
                                                                                    "docs/grokking.md")):
        trend, coverage = found["acc-trend"]
        clock = found["clock"][0]
        median = trend["median_error"]
        errs = (f"errs a median {error_text(trend)}" if median is not None and math.isfinite(median) else
                "so its median error is infinite")
        parts.append(f"on {name} ([{where}]({where})) it gives no forecast on {trend['no_forecast']} of the "
                     f"{trend['n']} runs that acquire (an infinite error), {errs}, and its interval holds the step "
                     f"{coverage.k} times of {coverage.n}; the registered clock (the median acquisition step of the "
                     f"same task's calibration runs) errs {error_text(clock)}")
    return ("**When.** The default forecast (`acc-trend`, from the accuracy alone: none while it sits at chance, "
            "then its rise extrapolated), at half the time to acquisition on the registered held-out runs: "
            + "; ".join(parts) + ".")


def heldout() -> str:
    rules = [make_rule(name) for name in FORECASTERS]
    runs = heldout_runs()
    return "\n".join(["## Once, after the choice: study/corpus/heldout", "",
                      "The 36 held-out runs of the study's registered test (seeds 100-102), scored with the default "
                      "as frozen above (`python -m study.record.user_forecast heldout`).", "",
                      *section("study/corpus/heldout", runs, rules)])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("gallery", "spread", "report", "readme"))
    args = parser.parse_args(argv)
    if args.command == "gallery":
        for path in run_gallery():
            print(path)
    elif args.command == "spread":
        low, high, count = spread()
        print(f"acc-trend log(actual / predicted time to go) on study/corpus/calibration, shares {SHARES}: "
              f"10th percentile {low}, 90th {high} (rounded out), from {count} forecasts")
    elif args.command == "report":
        DOC.write_text(report())
        print(DOC.read_text())
    else:
        print(readme_sentence())


if __name__ == "__main__":
    main()
