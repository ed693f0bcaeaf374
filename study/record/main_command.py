"""What the README's main command did, read from the summaries it left.

    python -m study.record.main_command          # the whole paragraph (docs/evidence.md)
    python -m study.record.main_command readme   # the README's one sentence

The main command's summary is the run whose whole output is docs/main-command/output.txt, and
docs/main-command/conditions.json says what it was made under (the CPU, its cores, whether it ran alone or what ran
beside it): a run made alone, with its conditions, replaces both and the README's sentence quotes its time. The fresh
seeds are the same command on seeds 3 and 4 (docs/fresh-seeds.md). Every number is read from them: the cost
(``wall_seconds``, ``cpu_seconds``), the acquisition and verdict, each layer's RankMe at step 0 and at its trough,
and the first alert of each rule; how often RankMe dips inside the warm-up, from the corpus
(:func:`study.phases.heldout.warmup_dips`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from capgeo_callbacks.keys import RANKME_RECOVERY, rule_name
from capgeo_callbacks.run.summary import read_summary
from study.checkout import CORPUS, ROOT

SUMMARY = ROOT / "docs" / "main-command" / "capgeo_summary.json.gz"
CONDITIONS = SUMMARY.with_name("conditions.json")
FRESH = CORPUS / "fresh"


def first_alert_step(summary: dict[str, Any], rule: str) -> int | None:
    """The step of ``rule``'s first run alert in ``summary`` (a rule's former name in it read as its name now)."""
    return next((alert["step"] for alert in summary.get("alerts", []) if rule_name(alert["rule"]) == rule_name(rule)
                 and alert["kind"] == "run"), None)


def layers_sentence(summary: dict[str, Any]) -> str:
    """Each layer's RankMe at step 0 and at its trough (the lowest raw value), and when it recovered."""
    parts = []
    for layer, info in (summary.get("layers") or {}).items():
        start = summary["series"][f"rankme/{layer}"][0][1]
        parts.append(f"{layer} from {start:.1f} to {info['floor']:.1f} at step {info['collapse_step']} "
                     f"(recovered by {info['recovery_step']})")
    return "; ".join(parts)


def conditions(path: Path = CONDITIONS) -> dict[str, Any]:
    """What the main command's run was made under: ``cores``, ``cpu`` (None: not recorded), ``alone`` and, when
    not alone, ``beside`` (what shared the machine)."""
    return json.loads(path.read_text())


def where(found: Mapping[str, Any]) -> str:
    """'alone on a 2-core AMD EPYC', or 'on a 2-core CPU, with three other runs sharing its cores'."""
    machine = f"a {found['cores']}-core {found.get('cpu') or 'CPU'}"
    return f"alone on {machine}" if found["alone"] else f"on {machine}, with {found['beside']}"


def paragraph(summary_path: Path = SUMMARY, fresh: Path = FRESH, conditions_path: Path = CONDITIONS) -> str:
    s = read_summary(summary_path)
    made = conditions(conditions_path)
    rules = s.get("registration") or {}
    warning, forecaster = rules.get("warning", "probe-crossing"), rules.get("forecaster", "token_acc-threshold")
    horizon = ((s.get("rules") or {}).get(forecaster) or {}).get("horizon")
    seeds = [read_summary(path) for path in sorted(fresh.glob("*.json.gz"))]
    text = (f"The command trains the smallest model ({s['parameters']:,} parameters) on hard sorting for "
            f"{s['max_steps']:,} steps with the default callbacks and shows steps out of the budget with the latest "
            f"accuracy, RankMe and forecast. Made {where(made)}, it took {s['wall_seconds'] / 60:.0f} minutes "
            f"({s['cpu_seconds'] / 60:.1f} CPU-minutes{'' if made['alone'] else '; alone it takes less'}, and "
            "acquisition and timing differ between CPUs); it was acquired at step "
            f"**{s['acquisition_step']:,}** and printed the verdict **`{s['verdict']}`, gap {s['gap']:,} steps**. "
            f"Inside the {s['warmup_steps']}-step learning-rate warm-up RankMe collapses and recovers: "
            f"{layers_sentence(s)}; the first recovery raises `{RANKME_RECOVERY}`'s alert (the `precursor "
            f"alert` the run prints) at step {first_alert_step(s, RANKME_RECOVERY)}: a dip every run shows, not a "
            "warning. The registered warning (a probe reading the answer tokens halfway from chance) came at step "
            f"{first_alert_step(s, warning)}, and the forecast first put acquisition within {horizon or 300} steps at "
            f"step {first_alert_step(s, forecaster)} (the whole output: "
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


def readme(summary_path: Path = SUMMARY, fresh: Path = FRESH, conditions_path: Path = CONDITIONS) -> str:
    """The README's sentence under the main command: what it trains, the verdict named for what it is, which alert
    to read first, and the time it takes (the run's own if it was made alone, else the fresh seeds')."""
    from study.phases.heldout import warmup_dips

    s = read_summary(summary_path)
    made = conditions(conditions_path)
    dips = warmup_dips()
    first = min(info["collapse_step"] for info in (s.get("layers") or {}).values())
    warning = (s.get("registration") or {}).get("warning", "probe-crossing")
    if made["alone"]:
        took = f"{where(made)} it took {s['wall_seconds'] / 60:.0f} minutes ({s['cpu_seconds'] / 60:.1f} CPU-minutes)"
    else:
        seeds = [read_summary(path) for path in sorted(fresh.glob("*.json.gz"))]
        took = (f"seeds {' and '.join(str(f['seed']) for f in seeds)} of it, run at once on the same "
                f"{made['cores']}-core CPU with nothing else running, took "
                + " and ".join(f"{f['wall_seconds'] / 60:.1f}" for f in seeds) + " minutes")
    return (f"It trains a {s['parameters']:,}-parameter transformer on hard sorting for {s['max_steps']:,} steps with "
            f"the default callbacks, acquires it at step {s['acquisition_step']:,} and ends with the verdict "
            f"`{s['verdict']}`: RankMe dipped and recovered inside the {s['warmup_steps']}-step learning-rate warm-up "
            f"(from step {first}), as it does in each of the {dips['runs']} corpus runs checked, shuffled-answer "
            "controls included, so the `precursor alert` it prints says training has started, not that the task is "
            f"coming; read the `{warning}` warning first (step {first_alert_step(s, warning)} here). "
            f"{took[:1].upper() + took[1:]}; what it prints and why: "
            "[docs/evidence.md](docs/evidence.md#the-main-command).")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="?", choices=("paragraph", "readme"), default="paragraph",
                        help="the whole paragraph (default) or the README's sentence")
    print(readme() if parser.parse_args(argv).what == "readme" else paragraph())


if __name__ == "__main__":
    main()
