"""The study's claims, tested on a folder of runs
===============================================

    python -m study.record.claims study/corpus/hard --out docs/claims

Each claim of the study (arXiv 2602.15997) is restated as a count over the runs that can test it, with n and
an interval, and a verdict by a rule fixed in this module before the runs it is applied to are counted
(docs/design.md, "The study's claims"):

- **fewer than** :data:`MIN_N` **runs**: ``inconclusive``, whatever they show (a tie, or n = 1, is never a
  verdict);
- **a share of runs** (the study says "all", "100%", "yes"; read as "in at least ``1 - BAND`` of runs"): the
  Wilson 95% interval of k/n at or above ``1 - BAND``: ``reproduced``; wholly below it: ``contradicted``;
  straddling it: ``inconclusive``;
- **a value "about x"** (a median): the 95% interval of the median (``scipy.stats.quantile_test``; it needs 6
  runs) inside the band the study's value names: ``reproduced``; wholly outside it: ``contradicted``; else
  ``inconclusive``;
- **a rise with size**: the bootstrap 95% interval (``scipy.stats.bootstrap``) of the difference of the
  medians of consecutive sizes, each with at least :data:`MIN_PER_SIZE` runs, above 0 for every step:
  ``reproduced``; below 0 for one: ``contradicted``; else ``inconclusive``;
- **only one measure** is reliable: it reproduces as a share of runs and every other measure is contradicted
  as one: ``reproduced``; it is contradicted, or another measure reproduces: ``contradicted``; else
  ``inconclusive``.

Each inconclusive claim says what would decide it: at the rate observed, how many runs the rule needs. A
deterministic rerun (the same settings, seed and series: :func:`~capgeo_callbacks.scoring.same_run`) counts
once. Detection uses the settings each run recorded.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from capgeo_callbacks.detection.stats import wilson
from capgeo_callbacks.keys import layer_names
from capgeo_callbacks.registry import default_measures
from capgeo_callbacks.run.reading import RunRecord, find_runs
from capgeo_callbacks.scoring import distinct
from study.record.report import precursor_rates, size_correlations

__all__ = ["BAND", "MIN_N", "MIN_PER_SIZE", "Claim", "claims", "page", "render"]

MIN_N = 5  # fewer runs: inconclusive
BAND = 0.2  # a claim about all runs reads as "at least 1 - BAND of them"
MIN_PER_SIZE = 3  # runs per size for a comparison of sizes
FLOOR_BAND = (1.5, 2.5)  # "a floor of about 2"
MOST_RUNS = 10_000  # the most runs "what would decide it" looks at
REPRODUCED, CONTRADICTED, INCONCLUSIVE = "reproduced", "contradicted", "inconclusive"


@dataclass(frozen=True)
class Claim:
    """One claim: what the study says, what the runs show, the verdict, and (inconclusive) what would decide it."""

    claim: str
    study: str
    measured: str
    n: int
    verdict: str
    decides: str = ""


def _rate(k: int, n: int) -> str:
    if not n:
        return "—"
    low, high = wilson(k, n)  # type: ignore[misc]
    return f"{k}/{n} = {k / n:.2f} [{low:.2f}, {high:.2f}]"


def share_verdict(k: int, n: int) -> str:
    """The verdict on "all runs" from k of n (module docstring)."""
    if n < MIN_N:
        return INCONCLUSIVE
    low, high = wilson(k, n)  # type: ignore[misc]
    return REPRODUCED if low >= 1 - BAND else CONTRADICTED if high < 1 - BAND else INCONCLUSIVE


def runs_to_decide(verdict: Callable[[int], str], n: int) -> tuple[int, str] | None:
    """The fewest runs (at least ``n`` and :data:`MIN_N`) at which ``verdict(m)``, the rule applied to ``m`` runs at
    the rates observed, is no longer inconclusive, and that verdict; None up to :data:`MOST_RUNS`."""
    for m in range(max(n, MIN_N, 1), MOST_RUNS + 1):
        found = verdict(m)
        if found != INCONCLUSIVE:
            return m, found
    return None


def _decides_share(k: int, n: int, what: str) -> str:
    if not n:
        return f"{what}: none yet"
    found = runs_to_decide(lambda m: share_verdict(round(k / n * m), m), n)
    if found is None:
        return f"no number of {what} at the rate observed ({k / n:.2f}) decides it"
    return f"{found[0]} {what} at the rate observed ({k / n:.2f}) would make it {found[1]}"


def _proportion_claim(claim: str, study: str, k: int, n: int, what: str) -> Claim:
    """A claim about all runs, decided by :func:`share_verdict` on k of n."""
    if not n:
        return Claim(claim, study, "—", 0, INCONCLUSIVE, f"{what}: none yet")
    verdict = share_verdict(k, n)
    return Claim(claim, study, _rate(k, n), n, verdict, _decides_share(k, n, what) if verdict == INCONCLUSIVE else "")


def median_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """The 95% interval of the median (scipy's ``quantile_test``); None with too few values for one."""
    from scipy.stats import quantile_test

    if len(values) < MIN_N:
        return None
    interval = quantile_test(np.array(values, dtype=float), q=float(np.median(values)), p=0.5).confidence_interval()
    low, high = float(interval.low), float(interval.high)
    return None if math.isnan(low) or math.isnan(high) else (low, high)


def band_verdict(interval: tuple[float, float] | None, band: tuple[float, float]) -> str:
    """Inside ``band``: reproduced; wholly outside: contradicted; else (or no interval) inconclusive."""
    if interval is None:
        return INCONCLUSIVE
    (low, high), (lo, hi) = interval, band
    return REPRODUCED if lo <= low and high <= hi else CONTRADICTED if high < lo or low > hi else INCONCLUSIVE


def rise_interval(smaller: Sequence[float], larger: Sequence[float]) -> tuple[float, float] | None:
    """The bootstrap 95% interval of median(larger) - median(smaller), each group resampled apart; None with fewer
    than :data:`MIN_PER_SIZE` runs in either."""
    from scipy.stats import bootstrap

    if min(len(smaller), len(larger)) < MIN_PER_SIZE:
        return None
    result = bootstrap((np.array(smaller, dtype=float), np.array(larger, dtype=float)),
                       lambda a, b, axis=-1: np.median(b, axis=axis) - np.median(a, axis=axis), vectorized=True,
                       paired=False, method="percentile", random_state=np.random.default_rng(0))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _records(records: Sequence[RunRecord], keep: Callable[[Mapping[str, Any]], bool]) -> list[RunRecord]:
    return [r for r in records if keep(r.summary) and not r.summary.get("negative_control")
            and not r.summary.get("shuffled_answers")]


def _runs(records: Sequence[RunRecord], keep: Callable[[Mapping[str, Any]], bool]) -> list[Mapping[str, Any]]:
    return [r.summary for r in _records(records, keep)]


def _deepest_floor(summary: Mapping[str, Any]) -> float | None:
    names = layer_names(summary)
    info = (summary.get("layers") or {}).get(names[-1]) if names else None
    return None if not info else info.get("floor")


def every_measure(summary: Mapping[str, Any]) -> bool:
    """Whether a run measured any measure beyond the default preset, as the registry defines it now (the measures
    phase: the same task and seed as a run of the hard phase, so it enters the comparison of measures only, made on
    the runs that measured them all). The preset has grown (ILDR, the weight norm), never by a costly measure."""
    return bool(set(summary.get("measure_names") or ()) - set(default_measures()))


def claims(records: Sequence[RunRecord]) -> list[Claim]:
    """Every claim, tested on ``records`` (negative controls left out; a rerun counted once). Runs with every measure
    are counted only in the comparison of measures, on those runs alone; every other claim reads the rest."""
    measured, _ = distinct([r for r in records if every_measure(r.summary)])
    records, _ = distinct([r for r in records if not every_measure(r.summary)])
    hard = _runs(records, lambda s: s.get("difficulty") == "hard")
    easy = _runs(records, lambda s: s.get("difficulty") == "easy")
    acquired_hard = [s for s in hard if s.get("acquisition_step") is not None]
    acquired_easy = [s for s in easy if s.get("acquisition_step") is not None]
    acquired = [s for s in _runs(records, lambda s: True) if s.get("acquisition_step") is not None]
    found: list[Claim] = []

    precursors = sum(s.get("verdict") == "precursor" for s in acquired_hard)
    found.append(_proportion_claim("RankMe collapse and recovery precede acquisition on hard tasks (verdict "
                                   "precursor, acquired hard runs)", "100%", precursors, len(acquired_hard),
                                   "acquired hard runs"))
    simultaneous = sum(s.get("verdict") != "precursor" for s in acquired_easy)
    found.append(_proportion_claim("Easy tasks: no precursor (collapse and acquisition together), acquired easy "
                                   "runs", "100%", simultaneous, len(acquired_easy), "acquired easy runs"))
    found.append(_only_rankme(_records(measured, lambda s: s.get("difficulty") == "hard")))

    # a floor needs no acquisition: levels kept as negative controls count here (shuffled answers do not)
    floored = [r.summary for r in records if r.summary.get("difficulty") == "hard"
               and not r.summary.get("shuffled_answers")]
    found.append(_mod_floor(floored))
    found.append(_mul_rises(floored))

    rhos = [s["layer_order_rho"] for s in hard if s.get("layer_order_rho") is not None]
    found.append(_proportion_claim("The collapse runs top-down (layer-order rho < 0, hard runs where it is "
                                   "defined)", "deepest first", sum(rho < 0 for rho in rhos), len(rhos),
                                   "hard runs"))

    # the sizes' curves on the runs made for the other claims (the every-measure runs are left out)
    rows = [row for row in size_correlations(_records(records, lambda s: s.get("difficulty") == "hard"))
            if row["rho"] is not None]
    above = sum(row["rho"] > 0.92 for row in rows)
    claim = _proportion_claim("Small models' RankMe curves predict larger ones' (Spearman over normalised "
                              "progress, per hard task)", "rho > 0.92", above, len(rows), "hard tasks with two sizes")
    if rows:
        claim = Claim(claim.claim, claim.study, f"{claim.measured} above 0.92; median rho "
                      f"{statistics.median(row['rho'] for row in rows):.2f}; "
                      + ", ".join(f"{row['task']} {row['rho']:.2f} ({row['large_seeds']} {row['large_size']} seed"
                                  f"{'s' if row['large_seeds'] > 1 else ''})" for row in rows),
                      claim.n, claim.verdict, claim.decides)
    found.append(claim)

    probe_early = [any((info or {}).get("precedes_acquisition") is True for tag, info in (s.get("measures") or {})
                       .items() if tag.startswith("probe_acc/")) for s in acquired_hard if any(
                   tag.startswith("probe_acc/") for tag in s.get("measures") or {})]
    found.append(_proportion_claim("Linear probes read the answer before acquisition (a layer's probe >= 0.5 more "
                                   "than `window` evaluations before it, acquired hard runs)", "yes",
                                   sum(probe_early), len(probe_early), "acquired hard runs with probes"))

    emerged = [s for s in acquired if s.get("logprob_emergence_step") is not None]
    earlier = sum(s["logprob_emergence_step"] < s["acquisition_step"] for s in emerged)
    accs = [s["acc_at_logprob_emergence"] for s in emerged if s.get("acc_at_logprob_emergence") is not None]
    claim = _proportion_claim("Log-prob emergence comes before accuracy acquisition (acquired runs)", "earlier, "
                              "at accuracy near 0", earlier, len(emerged), "acquired runs")
    if accs:
        claim = Claim(claim.claim, claim.study, f"{claim.measured}; median accuracy there "
                      f"{statistics.median(accs):.2f} (the verdict is on 'earlier' alone)", claim.n, claim.verdict,
                      claim.decides)
    found.append(claim)
    return found


def _only_rankme(hard_records: Sequence[RunRecord]) -> Claim:
    """RankMe reliable, every other measure not (module docstring), over the acquired hard runs that measured them
    all."""
    title, study = ("Only RankMe is a reliable precursor among the measures (precursor rate over acquired hard "
                    "runs)"), "RankMe 100%, others unreliable"
    rates = {row["measure"]: row for row in precursor_rates(hard_records)}
    rankme = rates.get("RankMe verdict")
    others = {m: row for m, row in rates.items() if not m.startswith(("RankMe", "rankme", "probe_acc"))
              and row["acquired"]}
    if not rankme or not rankme["acquired"] or not others:
        return Claim(title, study, "—", 0, INCONCLUSIVE, "acquired hard runs with every measure: none yet")

    def verdict(scale: float) -> str:
        def share(row: Mapping[str, Any]) -> str:
            m = round(row["acquired"] * scale)
            return share_verdict(round(row["preceded"] / row["acquired"] * m), m)

        mine, theirs = share(rankme), [share(row) for row in others.values()]
        if mine == CONTRADICTED or REPRODUCED in theirs:
            return CONTRADICTED
        return REPRODUCED if mine == REPRODUCED and all(v == CONTRADICTED for v in theirs) else INCONCLUSIVE

    best = max(others.values(), key=lambda row: row["preceded"] / row["acquired"])
    measured = (f"RankMe {_rate(rankme['preceded'], rankme['acquired'])}; best other: {best['measure']} "
                f"{_rate(best['preceded'], best['acquired'])}")
    n = rankme["acquired"]
    found = verdict(1.0)
    decides = ""
    if found == INCONCLUSIVE:
        needed = runs_to_decide(lambda m: verdict(m / n), n)
        decides = ("no number of runs at the rates observed decides it" if needed is None else
                   f"{needed[0]} acquired hard runs with every measure at the rates observed would make it "
                   f"{needed[1]}")
    return Claim(title, study, measured, n, found, decides)


def _mod_floor(floored: Sequence[Mapping[str, Any]]) -> Claim:
    """mod's deepest-layer floor about 2: the median's 95% interval inside :data:`FLOOR_BAND`; beside it, the
    other hard tasks whose median floor lies in the band too."""
    title, study = "mod collapses to a floor of about 2 (deepest layer, hard runs)", "RankMe ~ 2.0"
    by_task: dict[str, list[tuple[float, bool]]] = {}
    for s in floored:
        if (floor := _deepest_floor(s)) is not None:
            by_task.setdefault(str(s.get("task")), []).append((floor, s.get("acquisition_step") is not None))
    mod = [floor for floor, _ in by_task.get("mod", [])]
    if not mod:
        return Claim(title, study, "—", 0, INCONCLUSIVE, "hard mod runs: none yet")
    interval = median_interval(mod)
    lo, hi = FLOOR_BAND
    alike = [task for task, values in sorted(by_task.items())
             if task != "mod" and lo <= statistics.median(v for v, _ in values) <= hi]
    measured = (f"median {statistics.median(mod):.2f} (range {min(mod):.2f}-{max(mod):.2f}"
                + (f", 95% [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "") + f"); "
                f"{sum(acquired for _, acquired in by_task['mod'])} of {len(mod)} acquired; other hard tasks with a "
                f"median floor in {lo}-{hi}: {', '.join(alike) or 'none'}")
    verdict = band_verdict(interval, FLOOR_BAND)
    decides = ""
    if verdict == INCONCLUSIVE:
        decides = (f"a 95% interval of the median needs at least 6 runs (now {len(mod)})" if interval is None else
                   f"more hard mod runs: the interval straddles {lo}-{hi}")
    return Claim(title, study, measured, len(mod), verdict, decides)


def _mul_rises(floored: Sequence[Mapping[str, Any]]) -> Claim:
    """mul's deepest-layer floor rises with size: each step between consecutive sizes (module docstring)."""
    title, study = "mul's collapse floor rises with capacity (deepest layer, hard runs)", "rises"
    by_size: dict[str, list[float]] = {}
    for s in floored:
        if s.get("task") == "mul" and (floor := _deepest_floor(s)) is not None:
            by_size.setdefault(str(s.get("size")), []).append(floor)
    sizes = sorted(by_size, key=lambda size: min(s.get("parameters") or 0 for s in floored
                                                  if str(s.get("size")) == size))
    n = sum(len(v) for v in by_size.values())
    if len(sizes) < 2:
        return Claim(title, study, "—", n, INCONCLUSIVE, "hard mul runs of two sizes: none yet")
    steps = [(a, b, rise_interval(by_size[a], by_size[b])) for a, b in zip(sizes, sizes[1:], strict=False)]
    verdicts = [INCONCLUSIVE if interval is None else REPRODUCED if interval[0] > 0 else
                CONTRADICTED if interval[1] < 0 else INCONCLUSIVE for _, _, interval in steps]
    verdict = (CONTRADICTED if CONTRADICTED in verdicts else
               REPRODUCED if all(v == REPRODUCED for v in verdicts) else INCONCLUSIVE)
    measured = ", ".join(f"{size} {statistics.median(by_size[size]):.2f} (n={len(by_size[size])})" for size in sizes)
    measured += "; " + ", ".join(f"{b} - {a}: " + ("-" if interval is None else f"[{interval[0]:.2f}, "
                                                    f"{interval[1]:.2f}]") for a, b, interval in steps)
    decides = ""
    if verdict == INCONCLUSIVE:
        short = [f"{size} has {len(by_size[size])}" for size in sizes if len(by_size[size]) < MIN_PER_SIZE]
        decides = (f"at least {MIN_PER_SIZE} runs per size (" + ", ".join(short) + ")" if short else
                   "more runs per size: an interval straddles 0 (equal floors would never decide it)")
    return Claim(title, study, measured, n, verdict, decides)


def rule_text() -> str:
    """The verdict rule in words, with its constants (the page's preamble)."""
    lo, hi = FLOOR_BAND
    return (f"Verdicts by a rule fixed in `study/record/claims.py`: fewer than "
            f"{MIN_N} runs is inconclusive; a claim about all runs is reproduced when the Wilson 95% interval of its "
            f"share lies at or above {1 - BAND:g}, contradicted when it lies wholly below, else inconclusive; a value "
            f"\"about 2\" is reproduced when the 95% interval of the median lies in {lo}-{hi}, contradicted when "
            f"wholly outside; a rise with size needs at least {MIN_PER_SIZE} runs per size and a bootstrap 95% "
            "interval of the difference of medians above 0 (below 0: contradicted); \"only RankMe\" needs RankMe "
            "reproduced and every other measure contradicted. A tie or a single run is never a verdict.")


def render(found: Sequence[Claim], command: str, notes: Sequence[str] = ()) -> str:
    lines = ["# The study's claims on this corpus", "", f"`{command}`", "",
             rule_text() + " ([design.md](../design.md#the-studys-claims))", "", *notes,
             *([""] if notes else []),
             "| claim | study | measured (k/n, rate, Wilson 95%) | n | verdict | what would decide it |",
             "| --- | --- | --- | ---: | --- | --- |"]
    lines += [f"| {c.claim} | {c.study} | {c.measured} | {c.n} | {c.verdict} | {c.decides or '-'} |" for c in found]
    return "\n".join(lines) + "\n"


def page(records: Sequence[RunRecord], command: str) -> str:
    """The claims page: the claims on ``records``, and which runs were recorded twice (counted once)."""
    return render(claims(records), command, rerun_notes(records))


def rerun_notes(records: Sequence[RunRecord]) -> list[str]:
    """Which of ``records`` are one run recorded twice (:func:`~capgeo_callbacks.scoring.same_run`), in words."""
    _, reruns = distinct(list(records))
    notes = []
    if reruns:
        notes.append(f"{len(reruns)} runs are recorded twice (the same settings, seed and series: one run, one "
                     "label): " + ", ".join(f"`{a.path.parent.name}/{a.name}` = `{b.path.parent.name}/{b.name}`"
                                          for a, b in reruns)
                     + ". The runs with every measure count only in the comparison of measures, and the others "
                       "only elsewhere, so neither copy is counted twice in any claim.")
    return notes


def main(argv: Sequence[str] | None = None) -> list[Claim]:
    parser = argparse.ArgumentParser(prog="python -m study.record.claims", description=__doc__.split("\n")[3])
    parser.add_argument("runs_dirs", nargs="*", help="folders of runs (e.g. study/corpus/hard study/corpus/levels)")
    parser.add_argument("--out", help="write claims.md into this folder")
    parser.add_argument("--rule", action="store_true", help="print the verdict rule only")
    args = parser.parse_args(argv)
    if args.rule:
        print(rule_text())
        return []
    if not args.runs_dirs:
        parser.error("name at least one folder of runs")
    records = [record for folder in args.runs_dirs for record in find_runs(folder)]
    found = claims(records)
    text = render(found, "python -m study.record.claims " + " ".join(sys.argv[1:] if argv is None else argv),
                  rerun_notes(records))
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "claims.md").write_text(text)
    return found


if __name__ == "__main__":
    main()
