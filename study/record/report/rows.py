"""A run's table row and the per-measure precursor rate, from the runs
:func:`capgeo_callbacks.run.reading.find_runs` reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from capgeo_callbacks.keys import layer_names
from capgeo_callbacks.run.reading import RunRecord

MISSING = "—"
RANKME_PREFIX = "rankme/"
CSV_COLUMNS = (
    "run", "version", "task", "difficulty", "size", "seed", "parameters", "steps", "max_steps", "verdict",
    "verdict_layer", "gap", "acquisition_step", "logprob_emergence_step", "acc_at_logprob_emergence",
    "layer_order_rho", "summary_path",
)


# ------------------------------------------------------------------------------------------------- rows


def run_row(record: RunRecord) -> dict[str, Any]:
    """One run's table row: the fields of :data:`CSV_COLUMNS` (None where missing) plus per-layer dicts.

    Extra keys: ``floors`` (collapse floor per layer: the minimum RankMe from the peak of its whole-series
    collapse, None if the layer never collapsed), ``collapse_steps`` and ``min_rankme`` per layer, and
    ``precedes`` (per measure tag, whether its transition preceded acquisition; None if not acquired).
    """
    s = record.summary
    layers: Mapping[str, Mapping[str, Any]] = s.get("layers", {}) or {}
    names = layer_names(s)
    row: dict[str, Any] = {
        "run": record.name,
        "version": record.version,
        "task": s.get("task"),
        "difficulty": s.get("difficulty"),
        "size": s.get("size"),
        "seed": s.get("seed"),
        "parameters": s.get("parameters"),
        "steps": s.get("steps"),
        "max_steps": s.get("max_steps"),
        "verdict": s.get("verdict"),
        "verdict_layer": s.get("verdict_layer"),
        "gap": s.get("gap"),
        "acquisition_step": s.get("acquisition_step"),
        "logprob_emergence_step": s.get("logprob_emergence_step"),
        "acc_at_logprob_emergence": s.get("acc_at_logprob_emergence"),
        "layer_order_rho": s.get("layer_order_rho"),
        "summary_path": str(record.path),
    }
    row["floors"] = {name: (layers.get(name) or {}).get("floor") for name in names}
    row["collapse_steps"] = {name: (layers.get(name) or {}).get("collapse_step") for name in names}
    row["min_rankme"] = {name: (layers.get(name) or {}).get("min_rankme") for name in names}
    row["precedes"] = {tag: (info or {}).get("precedes_acquisition")
                       for tag, info in (s.get("measures", {}) or {}).items()}
    return row


def precursor_rates(records: Sequence[RunRecord], difficulty: str = "hard") -> list[dict[str, Any]]:
    """Per measure, how often its transition preceded acquisition, over the runs at ``difficulty``.

    Rows, in order:

    - ``RankMe verdict``: a run counts when its verdict is ``precursor`` (collapse *and* recovery before
      acquisition, docs/design.md), the headline measure;
    - per measure family with a tag per layer (``rankme/*``, ``probe_acc/*``): a run counts when any
      layer's transition preceded acquisition (``measures[tag]["precedes_acquisition"]``: the transition
      lies more than ``window`` evaluations before it; for RankMe this needs no recovery, so it is looser
      than the verdict), followed by one row per tag;
    - other measures (``grad_erank``, ``hessian/eig_0``, ``llc``, ...): one row per tag.

    Each row: ``measure``, ``runs`` (runs at that difficulty that measured it), ``acquired`` (of those,
    runs that acquired), ``preceded``, ``rate`` (= preceded / runs, the study's rate over all hard runs)
    and ``rate_acquired`` (= preceded / acquired). A rate with no runs is None.

    Args:
        records: the runs.
        difficulty: the difficulty to count ("hard": the study's precursor rate).
    """
    chosen = [r.summary for r in records if r.summary.get("difficulty") == difficulty]
    counts: dict[str, list[int]] = {}  # measure -> [runs, acquired, preceded]

    def count(measure: str, acquired: bool, preceded: bool) -> None:
        tally = counts.setdefault(measure, [0, 0, 0])
        tally[0] += 1
        tally[1] += int(acquired)
        tally[2] += int(preceded)

    order: list[str] = ["RankMe verdict"]
    families: dict[str, list[str]] = {}
    for s in chosen:
        if "verdict" in s:
            count("RankMe verdict", s.get("acquisition_step") is not None, s.get("verdict") == "precursor")
        layers = set(layer_names(s))
        by_family: dict[str, list[Mapping[str, Any]]] = {}
        for tag, info in (s.get("measures", {}) or {}).items():
            info = info or {}
            prefix, _, rest = tag.partition("/")
            family = f"{prefix}/*" if rest in layers else None
            if family is not None:
                by_family.setdefault(family, []).append(info)
                families.setdefault(family, [])
                if tag not in families[family]:
                    families[family].append(tag)
            elif tag not in order:
                order.append(tag)
            count(tag, info.get("precedes_acquisition") is not None, info.get("precedes_acquisition") is True)
        for family, infos in by_family.items():
            count(f"{family} (any layer)", any(i.get("precedes_acquisition") is not None for i in infos),
                  any(i.get("precedes_acquisition") is True for i in infos))
    measures = order[:1] + [m for family, tags in families.items() for m in (f"{family} (any layer)", *tags)]
    measures += order[1:]
    rows = []
    for measure in measures:
        if measure not in counts:
            continue
        runs, acquired, preceded = counts[measure]
        rows.append({"measure": measure, "runs": runs, "acquired": acquired, "preceded": preceded,
                     "rate": preceded / runs if runs else None,
                     "rate_acquired": preceded / acquired if acquired else None})
    return rows


