"""The study's claims, tested on a folder of runs
===============================================

    python -m study.record.claims corpus/hard --out docs/claims

Each claim of the study (arXiv 2602.15997) is restated as a count over the runs that can test it, with n,
the rate or the correlation, a Wilson 95% interval for rates, and a verdict: ``reproduced`` (the study's
value lies inside the interval, or the direction it claims holds with the interval on that side),
``not reproduced``, or ``not testable`` (no run can test it). Detection uses the settings each run recorded.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capgeo_callbacks.detection.stats import wilson
from capgeo_callbacks.keys import layer_names
from capgeo_callbacks.run.reading import RunRecord, find_runs
from study.record.report import precursor_rates, size_correlations

__all__ = ["Claim", "claims", "render"]


@dataclass(frozen=True)
class Claim:
    """One claim: what the study says, what the runs show, and the verdict."""

    claim: str
    study: str
    measured: str
    n: int
    verdict: str


def _rate(k: int, n: int) -> str:
    if not n:
        return "—"
    low, high = wilson(k, n)  # type: ignore[misc]
    return f"{k}/{n} = {k / n:.2f} [{low:.2f}, {high:.2f}]"


def _proportion_claim(claim: str, study: str, k: int, n: int, claimed: float, at_least: bool = False) -> Claim:
    """Reproduced when ``claimed`` lies in the Wilson interval (``at_least``: when the interval's upper end
    reaches it, i.e. the data do not rule out a rate that high)."""
    if not n:
        return Claim(claim, study, "—", 0, "not testable")
    low, high = wilson(k, n)  # type: ignore[misc]
    reproduced = high >= claimed if at_least else low <= claimed <= high
    return Claim(claim, study, _rate(k, n), n, "reproduced" if reproduced else "not reproduced")


def _records(records: Sequence[RunRecord], keep: Callable[[Mapping[str, Any]], bool]) -> list[RunRecord]:
    return [r for r in records if keep(r.summary) and not r.summary.get("negative_control")
            and not r.summary.get("shuffled_answers")]


def _runs(records: Sequence[RunRecord], keep: Callable[[Mapping[str, Any]], bool]) -> list[Mapping[str, Any]]:
    return [r.summary for r in _records(records, keep)]


def _deepest_floor(summary: Mapping[str, Any]) -> float | None:
    names = layer_names(summary)
    info = (summary.get("layers") or {}).get(names[-1]) if names else None
    return None if not info else info.get("floor")


DEFAULT_MEASURES = {"rankme", "probes"}


def every_measure(summary: Mapping[str, Any]) -> bool:
    """Whether a run measured more than the default measures (the measures phase: the same task and seed as a run of
    the hard phase, so it enters the comparison of measures only, made on the runs that measured them all)."""
    return bool(set(summary.get("measure_names") or ()) - DEFAULT_MEASURES)


def claims(records: Sequence[RunRecord]) -> list[Claim]:
    """Every claim, tested on ``records`` (negative controls left out). Runs with every measure are counted only in
    the comparison of measures, on those runs alone; every other claim reads the rest."""
    measured = [r for r in records if every_measure(r.summary)]
    records = [r for r in records if not every_measure(r.summary)]
    hard = _runs(records, lambda s: s.get("difficulty") == "hard")
    easy = _runs(records, lambda s: s.get("difficulty") == "easy")
    acquired_hard = [s for s in hard if s.get("acquisition_step") is not None]
    acquired_easy = [s for s in easy if s.get("acquisition_step") is not None]
    acquired = [s for s in _runs(records, lambda s: True) if s.get("acquisition_step") is not None]
    found: list[Claim] = []

    precursors = sum(s.get("verdict") == "precursor" for s in acquired_hard)
    found.append(_proportion_claim("RankMe collapse and recovery precede acquisition on hard tasks (verdict "
                                   "precursor, acquired hard runs)", "100%", precursors, len(acquired_hard), 1.0))
    simultaneous = sum(s.get("verdict") != "precursor" for s in acquired_easy)
    found.append(_proportion_claim("Easy tasks: no precursor (collapse and acquisition together), acquired easy "
                                   "runs", "100%", simultaneous, len(acquired_easy), 1.0))

    hard_records = _records(measured, lambda s: s.get("difficulty") == "hard")
    rates = {row["measure"]: row for row in precursor_rates(hard_records)}
    other = {m: row for m, row in rates.items() if not m.startswith(("RankMe", "rankme", "probe_acc"))
             and row["acquired"]}
    rankme_row = rates.get("RankMe verdict")
    if rankme_row and rankme_row["acquired"] and other:
        rankme_rate = rankme_row["preceded"] / rankme_row["acquired"]
        best = max(other.values(), key=lambda row: row["preceded"] / row["acquired"])
        best_rate = best["preceded"] / best["acquired"]
        measured = (f"RankMe {_rate(rankme_row['preceded'], rankme_row['acquired'])}; best other: "
                    f"{best['measure']} {_rate(best['preceded'], best['acquired'])}")
        verdict = "reproduced" if rankme_rate > best_rate else "not reproduced"
        found.append(Claim("Only RankMe is a reliable precursor among the measures (precursor rate over acquired "
                           "hard runs)", "RankMe 100%, others unreliable", measured, rankme_row["acquired"], verdict))
    else:
        found.append(Claim("Only RankMe is a reliable precursor among the measures", "RankMe 100%, others unreliable",
                           "—", 0, "not testable"))

    # a floor needs no acquisition: levels kept as negative controls count here (shuffled answers do not)
    floored = [r.summary for r in records if r.summary.get("difficulty") == "hard"
               and not r.summary.get("shuffled_answers")]
    mod_floors = [f for s in floored if s.get("task") == "mod" and (f := _deepest_floor(s)) is not None]
    if mod_floors:
        median = statistics.median(mod_floors)
        found.append(Claim("mod collapses to a floor of about 2 (deepest layer, hard runs)", "RankMe ~ 2.0",
                           f"median {median:.2f} (range {min(mod_floors):.2f}-{max(mod_floors):.2f})",
                           len(mod_floors), "reproduced" if 1.5 <= median <= 2.5 else "not reproduced"))
    else:
        found.append(Claim("mod collapses to a floor of about 2", "RankMe ~ 2.0", "—", 0, "not testable"))

    by_size: dict[str, list[float]] = {}
    for s in floored:
        if s.get("task") == "mul" and (floor := _deepest_floor(s)) is not None:
            by_size.setdefault(str(s.get("size")), []).append(floor)
    sizes = sorted(by_size, key=lambda size: min(s.get("parameters") or 0 for s in floored
                                                  if str(s.get("size")) == size))
    if len(sizes) >= 2:
        medians = [statistics.median(by_size[size]) for size in sizes]
        rising = all(a < b for a, b in zip(medians, medians[1:], strict=False))
        found.append(Claim("mul's collapse floor rises with capacity (deepest layer, hard runs)", "rises",
                           ", ".join(f"{size} {m:.2f}" for size, m in zip(sizes, medians, strict=True)),
                           sum(len(v) for v in by_size.values()), "reproduced" if rising else "not reproduced"))
    else:
        found.append(Claim("mul's collapse floor rises with capacity", "rises", "—", 0, "not testable"))

    rhos = [s["layer_order_rho"] for s in hard if s.get("layer_order_rho") is not None]
    top_down = sum(rho < 0 for rho in rhos)
    found.append(_proportion_claim("The collapse runs top-down (layer-order rho < 0, hard runs where it is "
                                   "defined)", "deepest first", top_down, len(rhos), 1.0, at_least=True)
                 if rhos else Claim("The collapse runs top-down", "deepest first", "—", 0, "not testable"))

    # the sizes' curves on the runs made for the other claims (hard_records are the every-measure runs)
    correlations = [row["rho"] for row in size_correlations(_records(records, lambda s: s.get("difficulty") == "hard"))
                    if row["rho"] is not None]
    above = sum(rho > 0.92 for rho in correlations)
    if correlations:
        measured = f"{_rate(above, len(correlations))} above 0.92; median rho {statistics.median(correlations):.2f}"
        found.append(Claim("Small models' RankMe curves predict larger ones' (Spearman over normalised progress, "
                           "per hard task)", "rho > 0.92", measured, len(correlations),
                           "reproduced" if above == len(correlations) else "not reproduced"))
    else:
        found.append(Claim("Small models' RankMe curves predict larger ones'", "rho > 0.92", "—", 0, "not testable"))

    probe_early = [any((info or {}).get("precedes_acquisition") is True for tag, info in (s.get("measures") or {})
                       .items() if tag.startswith("probe_acc/")) for s in acquired_hard if any(
                   tag.startswith("probe_acc/") for tag in s.get("measures") or {})]
    found.append(_proportion_claim("Linear probes read the answer before acquisition (a layer's probe >= 0.5 more "
                                   "than `window` evaluations before it, acquired hard runs)", "yes",
                                   sum(probe_early), len(probe_early), 1.0, at_least=True))

    emerged = [s for s in acquired if s.get("logprob_emergence_step") is not None]
    earlier = sum(s["logprob_emergence_step"] < s["acquisition_step"] for s in emerged)
    accs = [s["acc_at_logprob_emergence"] for s in emerged if s.get("acc_at_logprob_emergence") is not None]
    claim = _proportion_claim("Log-prob emergence comes before accuracy acquisition (acquired runs)", "earlier, "
                              "at accuracy near 0", earlier, len(emerged), 1.0, at_least=True)
    if accs:
        claim = Claim(claim.claim, claim.study, f"{claim.measured}; median accuracy there "
                      f"{statistics.median(accs):.2f}", claim.n, claim.verdict)
    found.append(claim)
    return found


def render(found: Sequence[Claim], command: str) -> str:
    lines = ["# The study's claims on this corpus", "", f"`{command}`", "",
             "| claim | study | measured (k/n, rate, Wilson 95%) | n | verdict |", "| --- | --- | --- | ---: | --- |"]
    lines += [f"| {c.claim} | {c.study} | {c.measured} | {c.n} | {c.verdict} |" for c in found]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> list[Claim]:
    parser = argparse.ArgumentParser(prog="python -m study.record.claims", description=__doc__.split("\n")[3])
    parser.add_argument("runs_dirs", nargs="+", help="folders of runs (e.g. corpus/hard corpus/levels corpus/s)")
    parser.add_argument("--out", help="write claims.md into this folder")
    args = parser.parse_args(argv)
    found = claims([record for folder in args.runs_dirs for record in find_runs(folder)])
    text = render(found, "python -m study.record.claims " + " ".join(sys.argv[1:] if argv is None else argv))
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "claims.md").write_text(text)
    return found


if __name__ == "__main__":
    main()
