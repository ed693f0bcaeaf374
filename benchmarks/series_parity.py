"""Whether two runs of the same command recorded the same values: every series of their summaries and every scalar
of their TensorBoard logs, compared value by value with ``==``, and their alerts, forecasts and verdicts.

    python -m benchmarks.series_parity RUN_BEFORE RUN_AFTER      # two run folders (version_N), or two summaries

Prints one line per kind of record (how many series and values, how many differ) and exits 1 if any differs.
What is expected to differ run to run (cost, commit, paths) is not compared; a rule's former name (``study``) is read
as its name now (``rankme-recovery``), as capgeo reads it, so a run made before a rename compares with one after.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from capgeo_callbacks.keys import rule_name
from capgeo_callbacks.publish.dashboard import OVERHEAD_TAG
from capgeo_callbacks.run.summary import SUMMARY_FILENAME

COMPARED_FIELDS = ("acquisition_step", "verdict", "gap", "layer_order_rho", "labels", "layers", "measures", "rows",
                   "selectors", "steps", "rules")


def summary_of(path: Path) -> dict[str, Any]:
    """A run's summary, its rules and alerts by each rule's name now."""
    file = path / SUMMARY_FILENAME if path.is_dir() else path
    summary = json.loads(file.read_text())
    summary["rules"] = {rule_name(name): value for name, value in (summary.get("rules") or {}).items()}
    summary["alerts"] = [{**alert, "rule": rule_name(alert["rule"])} if "rule" in alert else alert
                         for alert in summary.get("alerts") or []]
    return summary


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def compare_series(before: Mapping[str, Sequence[Sequence[float]]],
                   after: Mapping[str, Sequence[Sequence[float]]]) -> tuple[int, int, list[str]]:
    """(series compared, values compared, what differs) of two ``tag -> [[step, value], ...]`` mappings."""
    differ = [f"series only in one run: {tag}" for tag in sorted(set(before) ^ set(after))]
    values = 0
    for tag in sorted(set(before) & set(after)):
        one, two = before[tag], after[tag]
        if len(one) != len(two):
            differ.append(f"{tag}: {len(one)} vs {len(two)} points")
            continue
        values += len(one)
        differ += [f"{tag} at step {p[0]}: {p[1]!r} vs {q[1]!r}" for p, q in zip(one, two, strict=True)
                   if p[0] != q[0] or not same(p[1], q[1])]
    return len(set(before) & set(after)), values, differ


def tensorboard_scalars(run: Path) -> dict[str, list[list[float]]]:
    """Every scalar of a run folder's TensorBoard event files, ``tag -> [[step, value], ...]``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [[e.step, e.value] for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
            if tag != OVERHEAD_TAG}  # a cost: it differs run to run


def compare(before: Path, after: Path) -> list[str]:
    """Print what was compared and return every difference."""
    one, two = summary_of(before), summary_of(after)
    differences: list[str] = []
    count, values, differ = compare_series(one["series"], two["series"])
    print(f"summary series: {count} series, {values} values, {len(differ)} differ")
    differences += differ
    for name in ("alerts", "forecasts"):
        equal = json.dumps(one.get(name), sort_keys=True) == json.dumps(two.get(name), sort_keys=True)
        size = len(one.get(name) or []) if name == "alerts" else sum(len(v) for v in (one.get(name) or {}).values())
        print(f"{name}: {size} {'identical' if equal else 'DIFFER'}")
        differences += [] if equal else [f"{name} differ"]
    fields = [key for key in COMPARED_FIELDS if json.dumps(one.get(key), sort_keys=True)
              != json.dumps(two.get(key), sort_keys=True)]
    print(f"verdict, labels, layers, rows, ...: {len(COMPARED_FIELDS) - len(fields)} of {len(COMPARED_FIELDS)} "
          "fields identical" + (f"; differ: {', '.join(fields)}" if fields else ""))
    differences += [f"field {key} differs" for key in fields]
    if before.is_dir() and after.is_dir():
        count, values, differ = compare_series(tensorboard_scalars(before), tensorboard_scalars(after))
        print(f"TensorBoard scalars: {count} tags, {values} values, {len(differ)} differ")
        differences += differ
    return differences


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    differences = compare(args.before, args.after)
    for line in differences[:20]:
        print("  " + line)
    print("identical" if not differences else f"{len(differences)} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
