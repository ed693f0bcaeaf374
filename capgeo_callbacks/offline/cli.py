"""The offline-analysis command line: ``python -m capgeo_callbacks.offline``::

    python -m capgeo_callbacks.offline runs/mod-hard-xs-s0/version_0
    python -m capgeo_callbacks.offline pythia-70m/ --probe-file rows.pt --selector last

Prints the per-revision table and the verdict, and writes the summary JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from capgeo_callbacks.capture.selectors import SELECTORS
from capgeo_callbacks.detection import DetectionSettings
from capgeo_callbacks.integrations.hf_models import HF_NOTE
from capgeo_callbacks.offline.analysis import DEFAULT_NUM_ROWS, analyze
from capgeo_callbacks.offline.recorded import read_record
from capgeo_callbacks.offline.report_text import format_report
from capgeo_callbacks.offline.revisions import find_revisions
from capgeo_callbacks.run.failures import WarnOnce
from capgeo_callbacks.run.summary import OFFLINE_SUMMARY_FILENAME

__all__ = ["build_parser", "main"]

# command-line flag -> DetectionSettings field
_DETECTION_FLAGS = ("threshold", "patience", "window", "min_drop", "recovery_fraction", "recovery_evals",
                    "smoothing")


def _json_arg(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not JSON ({err}): {text!r}; e.g. '{{\"val_size\": 256}}'") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m capgeo_callbacks.offline`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m capgeo_callbacks.offline",
        description="Per-layer RankMe and precursor detection over saved revisions: Lightning .ckpt files "
                    "or Hugging Face save_pretrained folders (step1000/, step2000/, ...).",
        epilog=HF_NOTE + ".",
    )
    add = parser.add_argument
    add("paths", nargs="+", help=".ckpt files, run or checkpoint folders, HF model folders, or a folder of HF "
        "revision subfolders")
    add("--output", help=f"summary JSON path (default: {OFFLINE_SUMMARY_FILENAME} in the first path's folder)")
    add("--quiet", action="store_true", help="no table, only warnings")

    probe = parser.add_argument_group("probe set").add_argument
    probe("--probe-file", help="torch.save'd dict with input_ids (N x T) and optionally answer_mask, targets, "
          "attention_mask")
    probe("--task", help="task for the datamodule factory (default: recorded by the run)")
    probe("--difficulty", help="difficulty for the datamodule factory (default: recorded by the run)")
    probe("--seed", type=int, help="datamodule seed (default: recorded by the run)")
    probe("--datamodule-factory", help="dotted path of a callable (task=, difficulty=, **kwargs) -> datamodule "
          "(default: the one the run's summary records as datamodule_factory, as train.py's runs do)")
    probe("--datamodule-kwargs", type=_json_arg, help="more factory arguments as JSON, e.g. '{\"val_size\": 256}'")
    probe("--split", default="val", choices=("val", "test"), help="datamodule loader to use (default: %(default)s)")
    probe("--batch-size", type=int, default=256, help="batch size over a probe file (default: %(default)s)")

    measure = parser.add_argument_group("measures").add_argument
    measure("--selector", choices=SELECTORS, help="token rows (default: the live monitor's; else answer if the "
            "probe set has answer_mask, else last)")
    measure("--num-rows", type=int, help=f"RankMe rows per layer (default: the live monitor's, else "
            f"{DEFAULT_NUM_ROWS})")
    measure("--layers", help="comma-separated module names or globs (.ckpt: default the live monitor's; HF: globs "
            "over embed, layers.*, default all)")
    measure("--probes", action="store_true", default=None, help="also held-out linear probe accuracy per layer "
            "(default: where the live run measured them)")
    measure("--monitor", help="accuracy key the LightningModule logs (default: the live run's, else val/acc)")

    model = parser.add_argument_group("models").add_argument
    model("--module-class", help="dotted path of the LightningModule class of .ckpt files, e.g. "
          "models.CapabilityModule (default: recorded in the checkpoint)")
    model("--module-kwargs", type=_json_arg, help="JSON overrides for load_from_checkpoint")
    model("--device", default="cpu", help="cpu, cuda or cuda:N (default: %(default)s)")
    model("--dtype", default="float32", choices=("float32", "bfloat16", "float16", "auto"),
          help="HF weights dtype (default: %(default)s)")
    model("--allow-pickle", action="store_true", help="unpickle checkpoints fully (weights_only=False); only for "
          "files you trust")

    detect = parser.add_argument_group(
        "detection", "each flag replaces one of the live run's recorded settings (else of the defaults); "
        "definitions: docs/design.md, \"Detection\"").add_argument
    detect("--threshold", type=float, help="acquisition accuracy threshold (default 0.5)")
    detect("--patience", type=int, help="evaluations at or above it that confirm acquisition (default 3)")
    detect("--window", type=int, help="evaluations either side of acquisition that count as simultaneous "
           "(default 3)")
    detect("--min-drop", type=float, help="least peak-to-trough drop of a collapse, as a fraction of the peak "
           "(default 0.25)")
    detect("--recovery-fraction", type=float, help="rise from the trough, as a fraction of the drop, that "
           "confirms recovery (default 0.1)")
    detect("--recovery-evals", type=int, help="evaluations the rise must hold (default 2)")
    detect("--smoothing", type=int, help="odd width of the moving average over RankMe; 1: none (default 3)")
    detect("--drop-duplicates", action="store_true", help="leave out revisions whose weights equal an earlier one's")
    return parser


def _settings(args: argparse.Namespace) -> DetectionSettings | None:
    """None (the run's recorded settings) without detection flags; else the recorded (or default) settings
    with the given ones replaced. Raises ValueError on an invalid value."""
    given = {name: getattr(args, name) for name in _DETECTION_FLAGS if getattr(args, name) is not None}
    if not given:
        return None
    recorded = read_record(find_revisions(args.paths, allow_pickle=args.allow_pickle), args.allow_pickle,
                           WarnOnce()).settings
    return (recorded or DetectionSettings()).replace(**given)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the analysis from the command line: print the table and write the summary JSON.

    Returns:
        0 on success, 2 on a usage error (the message on stderr says what to pass).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.num_rows is not None and args.num_rows < 2:
        parser.error(f"--num-rows must be at least 2, got {args.num_rows}")
    if args.batch_size < 1:
        parser.error(f"--batch-size must be at least 1, got {args.batch_size}")
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                            format="%(levelname)s %(name)s: %(message)s")
    layers = [p.strip() for p in args.layers.split(",") if p.strip()] if args.layers else None
    first = Path(args.paths[0])
    folder = first if first.is_dir() else first.parent
    output = Path(args.output) if args.output else folder / OFFLINE_SUMMARY_FILENAME
    try:
        summary = analyze(
            args.paths, probe_file=args.probe_file, task=args.task, difficulty=args.difficulty, seed=args.seed,
            datamodule_factory=args.datamodule_factory, datamodule_kwargs=args.datamodule_kwargs, split=args.split,
            module_class=args.module_class, module_kwargs=args.module_kwargs, selector=args.selector,
            num_rows=args.num_rows, layers=layers, probes=args.probes, batch_size=args.batch_size,
            device=args.device, dtype=args.dtype, monitor=args.monitor, drop_duplicates=args.drop_duplicates,
            allow_pickle=args.allow_pickle, settings=_settings(args), output=output,
        )
    except (ValueError, FileNotFoundError, ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(format_report(summary))
        print(f"\nsummary: {output}")
    return 0
