"""The test suite's and the quick tier's wall time, as the README's test commands run them, and the README's line.

    python -m benchmarks.suite_time run --machine "2-core AMD EPYC" --out benchmarks/results/suite-time.json
    python -m benchmarks.suite_time line benchmarks/results/suite-time.json

``run`` runs each command once, in turn, from the checkout (a quiet machine: nothing else in flight; a loaded one
doubles the time), and records pytest's own closing line (its counts and its seconds) and its slowest tests
(``--durations``: where the time goes) with the commit and the machine given; ``line`` prints the README's sentence
from that record, beside each target (the commit stays in the record: a user page names none). Each time is pytest's
own, not the interpreter's start.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TIERS = {  # name: (the README's command's pytest arguments, the target in seconds of pytest)
    "the whole suite": (("-q", "-n", "auto"), 360),
    "the quick tier": (("-q", "-n", "auto", "-m", "not slow"), 90),
}
SLOWEST = 30  # the slowest tests (setup, call or teardown) each tier's record keeps: where the time goes
DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?P<when>setup|call|teardown)\s+(?P<test>\S.*?)\s*$", re.M)
CLOSING = re.compile(r"^=*\s*(?P<counts>\d+ (?:passed|failed)[^=]*?) in (?P<seconds>[\d.]+)s", re.M)


def closing_line(output: str) -> tuple[str, float]:
    """pytest's closing counts ('1652 passed, 4 xfailed, ...') and its seconds, from its output."""
    found = list(CLOSING.finditer(output))
    if not found:
        raise ValueError("no closing line of pytest ('N passed ... in S s') in its output")
    return found[-1]["counts"].strip(), float(found[-1]["seconds"])


def slowest(output: str) -> list[dict[str, Any]]:
    """pytest's "slowest durations" (``--durations``): each phase's seconds, the phase and the test, slowest first."""
    return [{"seconds": float(m["seconds"]), "when": m["when"], "test": m["test"]} for m in DURATION.finditer(output)]


def run_count(counts: str) -> int:
    """How many tests ran: passed, failed, xfailed, xpassed and errors (not skipped or deselected)."""
    return sum(int(n) for n, kind in re.findall(r"(\d+) (\w+)", counts)
               if kind in ("passed", "failed", "xfailed", "xpassed", "error", "errors"))


def run(machine: str) -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    found: dict[str, Any] = {"machine": machine, "commit": commit.strip(), "tiers": {}}
    for name, (arguments, target) in TIERS.items():
        done = subprocess.run([sys.executable, "-m", "pytest", *arguments, "-p", "no:cacheprovider",
                               f"--durations={SLOWEST}"], cwd=ROOT, capture_output=True, text=True)
        counts, seconds = closing_line(done.stdout)
        found["tiers"][name] = {"command": "python -m pytest " + " ".join(repr(a) if " " in a else a
                                                                         for a in arguments),
                                "closing": counts, "seconds": seconds, "target": target,
                                "slowest": slowest(done.stdout)}
    return found


def line(found: dict[str, Any]) -> str:
    """The README's sentence: each tier's seconds of pytest and tests run, beside its target."""
    parts = []
    for name, tier in found["tiers"].items():
        within = "within" if tier["seconds"] <= tier["target"] else "over"
        failed = re.search(r"(\d+) failed", tier["closing"])
        failures = f", {failed[1]} failed" if failed else ""
        parts.append(f"{name} {tier['seconds']:.0f} s of pytest ({run_count(tier['closing']):,} tests{failures}; "
                     f"{within} its target of {tier['target']} s)")
    return (f"Timed alone on a {found['machine']} (nothing else in flight): "
            + ", ".join(parts) + ".")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    timed = sub.add_parser("run", help="time both tiers, one after the other")
    timed.add_argument("--machine", required=True, help="the machine, in words (e.g. '2-core AMD EPYC')")
    timed.add_argument("--out", type=Path, required=True, help="write the record (JSON) here")
    said = sub.add_parser("line", help="the README's sentence from a record")
    said.add_argument("record", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        found = run(args.machine)
        args.out.write_text(json.dumps(found, indent=1) + "\n")
        print(line(found))
    else:
        print(line(json.loads(args.record.read_text())))


if __name__ == "__main__":
    main()
