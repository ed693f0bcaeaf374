"""What the README's main command did, read from the summaries it left: the Quick start's paragraph.

    python -m study.record.main_command        # from docs/main-command/capgeo_summary.json.gz and corpus/fresh/

The main command's summary is the run whose whole output is docs/main-command/output.txt; the fresh seeds are the
same command on seeds 3 and 4 (docs/fresh-seeds.md). Every number of the paragraph is read from them: the cost
(``wall_seconds``, ``cpu_seconds``), the acquisition and verdict, each layer's RankMe at step 0 and at its trough,
and the first alert of each rule.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from capgeo_callbacks.run.summary import read_summary
from study.checkout import ROOT

SUMMARY = ROOT / "docs" / "main-command" / "capgeo_summary.json.gz"
FRESH = ROOT / "corpus" / "fresh"


def first_alert_step(summary: dict[str, Any], rule: str) -> int | None:
    return next((alert["step"] for alert in summary.get("alerts", []) if alert["rule"] == rule
                 and alert["kind"] == "run"), None)


def layers_sentence(summary: dict[str, Any]) -> str:
    """Each layer's RankMe at step 0 and at its trough (the lowest raw value), and when it recovered."""
    parts = []
    for layer, info in (summary.get("layers") or {}).items():
        start = summary["series"][f"rankme/{layer}"][0][1]
        parts.append(f"{layer} from {start:.1f} to {info['floor']:.1f} at step {info['collapse_step']} "
                     f"(recovered by {info['recovery_step']})")
    return "; ".join(parts)


def paragraph(summary_path: Path = SUMMARY, fresh: Path = FRESH) -> str:
    s = read_summary(summary_path)
    rules = s.get("registration") or {}
    warning, forecaster = rules.get("warning", "probe-crossing"), rules.get("forecaster", "token_acc-threshold")
    horizon = ((s.get("rules") or {}).get(forecaster) or {}).get("horizon")
    seeds = [read_summary(path) for path in sorted(fresh.glob("*.json.gz"))]
    text = (f"The command trains the smallest model ({s['parameters']:,} parameters) on hard sorting for "
            f"{s['max_steps']:,} steps with the default callbacks and shows steps out of the budget with the latest "
            "accuracy, RankMe and forecast. On this 2-core CPU machine, with three other runs sharing its cores, it "
            f"took {s['wall_seconds'] / 60:.0f} minutes ({s['cpu_seconds'] / 60:.1f} CPU-minutes; alone it takes "
            "less, and acquisition and timing differ between CPUs); it was acquired at step "
            f"**{s['acquisition_step']:,}** and printed the verdict **`{s['verdict']}`, gap {s['gap']:,} steps**. "
            f"Inside the {s['warmup_steps']}-step learning-rate warm-up RankMe collapses and recovers: "
            f"{layers_sentence(s)}; the first recovery raises the study's alert at step "
            f"{first_alert_step(s, 'study')}. The registered warning (a probe reading the answer tokens halfway "
            f"from chance) came at step {first_alert_step(s, warning)}, and the forecast first put acquisition "
            f"within {horizon or 300} steps at step {first_alert_step(s, forecaster)} (the whole output: "
            "[docs/main-command/output.txt](docs/main-command/output.txt)).")
    if seeds:
        outcomes = {(f.get("labels") or {}).get("outcome") for f in seeds}
        text += (f" Seeds {' and '.join(str(f['seed']) for f in seeds)}, run the same way two at once on the same "
                 "machine with nothing else running, took "
                 + " and ".join(f"{f['wall_seconds'] / 60:.1f}" for f in seeds) + " minutes ("
                 + " and ".join(f"{f['cpu_seconds'] / 60:.1f}" for f in seeds) + " CPU-minutes) and were "
                 + ("both acquired fully" if outcomes == {"acquired-fully"} else "labelled "
                    + ", ".join(sorted(map(str, outcomes))))
                 + ", at steps " + " and ".join(f"{f['acquisition_step']:,}" for f in seeds)
                 + " ([docs/fresh-seeds.md](docs/fresh-seeds.md)).")
    return text


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    print(paragraph())


if __name__ == "__main__":
    main()
