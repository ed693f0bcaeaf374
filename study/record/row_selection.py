"""Which rows RankMe reads: one run per task measured under three token selectors at once.

    python train.py --task copy --difficulty hard --measures rankme,probes \
        --extra-selectors first_answer,question_mean --logdir runs/row-selection   # the same for mod and sort
    python -m study.record.row_selection runs/row-selection --out docs/row-selection

Draws RankMe per layer for each selection (every answer position, one row per example at the position that
predicts the first answer, the mean over the question) beside accuracy, on a log step axis, and prints per
selection and layer: the RankMe at step 0, its minimum (and step), the collapse and recovery steps the
study's rule finds, and the acquisition step.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from capgeo_callbacks.detection import DetectionSettings, detect_run
from capgeo_callbacks.publish.figures import draw_run, new_figure
from capgeo_callbacks.run.reading import find_runs

SELECTIONS = {"answer": "rankme/", "first_answer": "rankme_first_answer/", "question_mean": "rankme_question_mean/"}


def as_default(summary: dict, prefix: str) -> dict:
    """The summary with the series of ``prefix`` as its RankMe (so the shared drawing and detection read it)."""
    series = {tag: points for tag, points in summary["series"].items() if not tag.startswith("rankme")}
    rankme = {tag[len(prefix):]: points for tag, points in summary["series"].items() if tag.startswith(prefix)}
    series.update({f"rankme/{name}": points for name, points in rankme.items()})
    detected = detect_run(summary["series"]["acc"], rankme, DetectionSettings())
    return {**summary, **detected, "series": series, "alerts": []}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m study.record.row_selection", description=__doc__.split("\n")[0])
    parser.add_argument("runs_dir")
    parser.add_argument("--out", default="docs/row-selection")
    args = parser.parse_args()
    records = [r for r in find_runs(args.runs_dir) if "rankme_first_answer/norm_f" in r.summary["series"]]
    figure = new_figure(15, 3.6 * len(records) + 0.8, 90)
    axes = figure.subplots(len(records), len(SELECTIONS), squeeze=False)
    lines = ["| task | selection | rows | layer | RankMe at step 0 | minimum (step) | collapse step | recovery "
             "step | acquisition step |", "|" + " --- |" * 9]
    for row, record in enumerate(records):
        summary = record.summary
        for column, (selection, prefix) in enumerate(SELECTIONS.items()):
            view = as_default(summary, prefix)
            axis = axes[row][column]
            twin, _ = draw_run(axis, view, markers=True, linewidth=1.3)
            axis.set_title(f"{summary['task']} {summary['difficulty']}: {selection} rows", fontsize=9)
            twin.tick_params(labelsize=7)
            axis.tick_params(labelsize=7)
            rows = summary["rows"].get(f"{prefix}norm_f")
            for layer, info in view["layers"].items():
                points = view["series"][f"rankme/{layer}"]
                low = min(points, key=lambda p: p[1])
                lines.append(f"| {summary['task']} | {selection} | {rows} | {layer} | {points[0][1]:.1f} | "
                             f"{low[1]:.2f} ({low[0]}) | {info['collapse_step']} | {info['recovery_step']} | "
                             f"{view['acquisition_step']} |")
    figure.suptitle("RankMe per layer (colour: shallow to deep, log), accuracy (black) and answer probability "
                    "(dotted) on a log step axis; v collapse, ^ recovery, red dashed acquisition", fontsize=10)
    figure.tight_layout(rect=(0, 0, 1, 0.97))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    figure.savefig(out / "row_selection.png")
    (out / "row_selection.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
