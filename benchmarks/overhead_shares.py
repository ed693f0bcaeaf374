"""capgeo's share of each run's own time as the runs measured it: committed runs' summaries, folder by folder.

    python -m benchmarks.overhead_shares line study/corpus/twins/heldout      # the README's cost sentence
    python -m benchmarks.overhead_shares line benchmarks/results/budget/sort-hard/0.03 study/corpus/twins/heldout
    python -m benchmarks.overhead_shares table study/corpus/twins/calibration study/corpus/twins/heldout

Every run with a budget setting records capgeo's CPU and wall time beside the run's own (the summary's
``overhead``; docs/overhead.md). A folder is a set of runs: its runs' whole-run CPU shares (``capgeo_share``), n,
median and largest, with the setting they ran under, the measures they carried and each measure's own part of the
share (its CPU seconds over the run's, from the record's per-piece ``work``). Nothing is timed here: the figures are
the runs' own, as committed, so anyone can re-score them. Paired whole runs that check them are
:mod:`benchmarks.overhead_budget`'s: its ``--out X.json`` keeps each setting's runs in ``X/<setting>/``, and such a
folder's set says what its pairs measured (the ratio to the bare runs, and whether it agrees with the share).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from capgeo_callbacks.publish.text import markdown_row
from capgeo_callbacks.run.overhead_setting import DEFAULT_OVERHEAD_BUDGET
from capgeo_callbacks.run.reading import capgeo_share, find_runs

PIECES = {  # a piece of work as the overhead record names it: how a reader knows it
    "rankme": "RankMe (with ILDR on its rows)", "probe_acc": "the probes", "weight_norm": "the weight norm",
    "CommutatorDefectMonitor": "the commutator defect", "detector": "the rules", "figures": "the figures",
}
EVERY_RUNS = ("detector", "figures")  # pieces every run has, which are no measure


@dataclass(frozen=True)
class Paired:
    """What the paired whole runs a set was made in measured (``benchmarks.overhead_budget``'s result)."""

    level: str  # task/difficulty
    pairs: int
    mean: float  # the mean ratio of the measured run's CPU time to the bare run's
    half_width: float  # of its 95% interval
    predicted: float | None  # the ratio the runs' own records predict (median)
    agrees: bool | None  # whether the interval holds it
    width: float | None = None  # the half-width asked of the interval (None: not recorded)

    @property
    def narrow(self) -> bool:
        """Whether the interval is as narrow as asked (a wide one agrees with almost anything)."""
        return self.width is None or self.half_width <= self.width


def read_pairs(folder: Path) -> Paired | None:
    """The pairs ``folder`` (``X/<setting>/``) was made in, from ``X.json`` beside it; None if it holds no such runs."""
    result = folder.parent.with_suffix(".json")
    if not result.is_file():
        return None
    found = json.loads(result.read_text())
    row = next((row for row in found["rows"] if row["setting"] == folder.name), None)
    if row is None:
        return None
    predicted = [value for value in row["predicted"] if value is not None]
    return Paired(f"{found['task']}/{found['difficulty']}", len(row["ratios"]), row["mean"], row["half_width"],
                  statistics.median(predicted) if predicted else None, row["agrees"], found.get("width"))


@dataclass(frozen=True)
class ShareSet:
    """One folder's runs and what they say they cost."""

    folder: str
    shares: list[float]  # capgeo's whole-run CPU share, one per run that recorded one
    left_out: int  # runs without a share (no budget setting, or an earlier record)
    settings: list[str]  # the overhead settings they ran under
    parameters: tuple[int, int]  # smallest and largest model
    pieces: dict[str, list[float]]  # each piece of work's own CPU share, one per run that ran it
    threads: frozenset[int] = frozenset()  # the torch threads the runs recorded
    paired: Paired | None = None  # the paired whole runs it was made in, if it was

    @property
    def n(self) -> int:
        return len(self.shares)


def read_set(folder: str | Path) -> ShareSet:
    shares, pieces, settings, sizes, counts, left_out = [], {}, set(), [], set(), 0
    for record in find_runs(folder):
        share = capgeo_share(record.summary)
        overhead = record.summary.get("overhead") or {}
        run_cpu = overhead.get("run_cpu_seconds")
        if share is None or not run_cpu:
            left_out += 1
            continue
        shares.append(share)
        settings.add(str(overhead.get("setting")))
        sizes.append(int(record.summary.get("parameters") or 0))
        if isinstance(record.summary.get("threads"), int):
            counts.add(record.summary["threads"])
        for piece, work in (overhead.get("work") or {}).items():
            if work.get("runs") or work.get("cpu_seconds"):  # the rules' time counts at no due evaluation
                pieces.setdefault(piece, []).append(float(work.get("cpu_seconds", 0.0)) / run_cpu)
    if not shares:
        raise ValueError(f"no run under {str(folder)!r} records capgeo's share (a summary's 'overhead' with "
                         "'shares': a run with an overhead budget setting)")
    return ShareSet(str(folder), shares, left_out, sorted(settings), (min(sizes), max(sizes)), pieces,
                    frozenset(counts), read_pairs(Path(folder)))


def percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def measures(found: ShareSet) -> str:
    """The measures the runs carried (the rules and the figures, every run's, left out)."""
    carried = [PIECES.get(piece, piece) for piece in ordered(found.pieces) if piece not in EVERY_RUNS]
    return ", ".join(carried[:-1]) + " and " + carried[-1] if len(carried) > 1 else "".join(carried)


def ordered(pieces: Sequence[str] | dict[str, list[float]]) -> list[str]:
    """Pieces in the order of :data:`PIECES`, any other after them."""
    return sorted(pieces, key=lambda p: list(PIECES).index(p) if p in PIECES else len(PIECES))


def threads(found: ShareSet) -> str:
    counts = sorted(found.threads)
    return " or ".join(map(str, counts)) + (" thread" if counts == [1] else " threads") if counts else \
        "threads not recorded"


def setting_words(found: ShareSet) -> str:
    return " and ".join("every point measured (`overhead_budget=\"measure\"`)" if setting == "measure"
                        else f"a budget of {setting}" for setting in found.settings)


def clause(found: ShareSet) -> str:
    """One set in words: n, median and largest, what the runs carried and under which setting, and what its pairs
    measured, if it was made in pairs."""
    parts = sorted(((statistics.median(v), p) for p, v in found.pieces.items() if p not in EVERY_RUNS),
                   reverse=True)
    largest_part = f"; its largest part {PIECES.get(parts[0][1], parts[0][1])}, a median {percent(parts[0][0])}" \
        if parts else ""
    low, high = found.parameters
    size = f"{low / 1e6:.2f}M" if low == high else f"{low / 1e6:.2f}-{high / 1e6:.2f}M"
    text = (f"on the {found.n} runs of `{found.folder}` ({size} parameters, {threads(found)}, {setting_words(found)}, "
            f"carrying {measures(found)}): a median **{percent(statistics.median(found.shares))}**, the largest "
            f"{percent(max(found.shares))}{largest_part}")
    paired = found.paired
    if paired is None:
        return text
    verdict = {True: "they agree", False: "they disagree", None: "too few pairs to say"}[paired.agrees]
    if paired.agrees is not None and not paired.narrow:
        verdict += f" (the interval is wider than the ±{paired.width} asked: more pairs are due)"
    predicted = "" if paired.predicted is None else f", where the runs' own records predict {paired.predicted:.3f}"
    return (f"{text}; paired with {paired.pairs} whole runs of {paired.level} without the measures, it took "
            f"{paired.mean:.3f} [{paired.mean - paired.half_width:.3f}, {paired.mean + paired.half_width:.3f}] times "
            f"their CPU time{predicted}: {verdict}")


def line(sets: Sequence[ShareSet]) -> str:
    """The README's sentence: each set's clause, then what the default budget does and where the check is."""
    checked = "paired whole runs check the self-measured share" if any(found.paired for found in sets) else \
        "paired whole runs that check the self-measured share are not made yet"
    return (f"**Cost.** Each run records capgeo's own share of its CPU time: {'; '.join(map(clause, sets))}. The "
            f"default budget ({DEFAULT_OVERHEAD_BUDGET:.0%}) thins the measuring to hold its share; "
            f"[{checked}](docs/overhead.md#checking-the-self-measured-share).")


def table(sets: Sequence[ShareSet]) -> str:
    """One row per folder: n, the setting, capgeo's whole-run CPU share (median, largest) and each piece's median."""
    names = ordered({p for found in sets for p in found.pieces})
    head = ["runs", "n", "setting", "capgeo's CPU share: median", "largest", *(PIECES.get(p, p) for p in names)]
    rows = [markdown_row(head), markdown_row(["---", *("---:" for _ in head[1:])])]
    for found in sets:
        cells = [f"`{found.folder}`", str(found.n), ", ".join(found.settings),
                 percent(statistics.median(found.shares)), percent(max(found.shares)),
                 *(percent(statistics.median(found.pieces[p])) if p in found.pieces else "" for p in names)]
        rows.append(markdown_row(cells))
    left = [f"`{found.folder}`: {found.left_out}" for found in sets if found.left_out]
    note = f"\n\nRuns without a share, left out: {', '.join(left)}." if left else ""
    return "\n".join(rows) + "\n\nEach piece's column is its own CPU seconds over the run's, the median over the " \
        "runs that ran it." + note


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overhead_shares", description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["line", "table"])
    parser.add_argument("folders", nargs="+", help="folders of committed runs' summaries, one set each")
    args = parser.parse_args(argv)
    sets = [read_set(folder) for folder in args.folders]
    if args.what == "line":
        print(line(sets))
    else:
        print(table(sets))


if __name__ == "__main__":
    main()
