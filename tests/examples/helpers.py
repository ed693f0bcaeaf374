"""Running a gallery example end to end and reading what capgeo made of it.

An example's ``main(...)`` trains a user's model with capgeo's callbacks attached and returns the run folder;
:func:`run_example` runs it once, catching what a user would have seen (warnings, the ``capgeo`` logger's
alerts, what ``on_alert=print`` printed) beside the run's ``capgeo_summary.json``. The checks below are the
promises of issue 28's "Done when", on one run: each test asserts one of them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import math
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from capgeo_callbacks import SUMMARY_FILENAME, read_summary
from capgeo_callbacks.rules import Needs, default_rules

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def load_example(name: str) -> ModuleType:
    """The example ``examples/<name>.py`` as a module (not run: its ``main`` is called by the test)."""
    path = EXAMPLES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"capgeo_example_{name}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class ExampleRun:
    """One run of an example: its folder and summary, and everything it said on the way."""

    folder: Path
    summary: dict[str, Any]
    messages: list[str] = field(default_factory=list)  # warnings and ``capgeo`` log records, in order
    printed: str = ""  # standard output (``on_alert=print``, the progress bar)
    cpu_seconds: float = 0.0

    def series(self, tag: str) -> list[tuple[int, float]]:
        return [(int(step), math.nan if value is None else float(value))
                for step, value in self.summary["series"].get(tag, [])]

    @property
    def acquisition_step(self) -> int | None:
        return self.summary.get("acquisition_step")


class _Records(logging.Handler):
    def __init__(self, messages: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.messages = messages

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def run_example(main: Callable[..., Path], **kwargs: Any) -> ExampleRun:
    """``main(**kwargs)``, with its warnings, ``capgeo`` log records and printed output caught."""
    messages: list[str] = []
    handler = _Records(messages)
    capgeo_log = logging.getLogger("capgeo")
    capgeo_log.addHandler(handler)
    printed = io.StringIO()
    started = time.process_time()
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(printed):
            warnings.simplefilter("always")
            folder = main(**kwargs)
    finally:
        capgeo_log.removeHandler(handler)
    messages += [str(warning.message) for warning in caught]
    summary = read_summary(Path(folder) / SUMMARY_FILENAME)
    return ExampleRun(Path(folder), summary, messages, printed.getvalue(), time.process_time() - started)


# What an example promises, one check each (a failed check says what it saw).

def check_acquired_late(run: ExampleRun, chance: float, plateau_until: int, end_above: float = 0.9) -> None:
    """Accuracy near chance up to ``plateau_until`` (below the midpoint of chance and 0.5), then acquired:
    >= 0.5 held from the acquisition step (capgeo's label, from val/acc alone) and >= ``end_above`` at the end."""
    acc = run.series("acc")
    early = [value for step, value in acc if step <= plateau_until]
    assert early and max(early) < (chance + 0.5) / 2, f"not near chance up to step {plateau_until}: {acc}"
    assert run.acquisition_step is not None and run.acquisition_step > plateau_until, f"acquisition: {acc}"
    assert acc[-1][1] >= end_above, f"not learned by the end: {acc[-3:]}"


def check_rankme_per_layer(run: ExampleRun, layers: list[str]) -> None:
    """RankMe of every watched layer at every evaluation, each a number in [1, rows]."""
    steps = [step for step, _ in run.series("acc")]
    for layer in layers:
        points = run.series(f"rankme/{layer}")
        assert [step for step, _ in points] == steps, f"rankme/{layer}: {len(points)} points, {len(steps)} evaluations"
        assert all(1.0 <= value <= run.summary["rows"][f"rankme/{layer}"] for _, value in points)


def check_rankme_under_the_budget(run: ExampleRun, layers: list[str]) -> None:
    """Under the default overhead budget: RankMe of every watched layer at every evaluation of the protected start,
    then at an even stride (one in k of the evaluations, k only growing, at most the record's ``max_stride``) to the
    end, never dropped; where any evaluation was left out, said once, with the evaluations kept and capgeo's share."""
    record = run.summary["overhead"]
    steps = [step for step, _ in run.series("acc")]
    start = [step for step in steps if step <= record["protected_until_step"]]
    for layer in layers:
        kept = [step for step, _ in run.series(f"rankme/{layer}")]
        assert kept[: len(start)] == start and set(kept) <= set(steps), f"rankme/{layer}: {kept[:10]}..."
        at = [steps.index(step) for step in kept[len(start) - 1:]]
        gaps = [b - a for a, b in zip(at, at[1:], strict=False)]
        assert gaps == sorted(gaps) and all(1 <= gap <= record["max_stride"] for gap in gaps), gaps
        assert len(steps) - 1 - at[-1] < record["max_stride"], f"rankme/{layer} stops at {kept[-1]} of {steps[-1]}"
    work = record["work"]["rankme"]
    said = [message for message in run.messages if "overhead budget" in message and "rankme " in message]
    assert len(kept) == work["runs"] and bool(said) == (work["thinned"] > 0), said
    assert len(said) == len(set(said)) <= 2, said  # once each: where it thins, and where it cannot hold
    recorded = [text for text in record["said"] if "rankme " in text]  # the summary keeps what was said
    assert len(recorded) == len(said) and all(text in message for text, message in zip(recorded, said, strict=True))
    for message in said:  # the figure: kept of due so far, and projected over the run's whole budget of steps
        figure = re.search(r"rankme (\d+) of (\d+) so far, about (\d+) of (\d+) over the run", message)
        assert figure, message
        so_far, due, about, whole = map(int, figure.groups())
        assert so_far <= due and len(start) <= due <= len(steps) and about <= whole, message


def check_probe_accuracy(run: ExampleRun, layer: str | None, start_below: float, end_above: float) -> None:
    """A linear probe on ``layer`` (None: the deepest probed) logged: low at step 0, reading the answer at the end."""
    probed = [tag for tag in run.summary["series"] if tag.startswith("probe_acc/")]
    points = run.series(f"probe_acc/{layer}" if layer is not None else (probed[-1] if probed else "probe_acc/"))
    assert points, f"no probe_acc/{layer} series; series: {sorted(run.summary['series'])}"
    assert points[0][0] == 0 and points[0][1] <= start_below, f"probe at step 0: {points[:3]}"
    assert points[-1][1] >= end_above, f"probe at the end: {points[-3:]}"


def check_alert_before_acquisition(run: ExampleRun, rule: str) -> None:
    """``rule`` raised an alert before the acquisition step (a warning, not a report)."""
    steps = [alert["step"] for alert in run.summary["alerts"] if alert["rule"] == rule]
    assert run.acquisition_step is not None
    assert steps and min(steps) < run.acquisition_step, (
        f"{rule}: alerts at {steps or 'no step'}, acquisition at {run.acquisition_step}; "
        f"alerts from {sorted({alert['rule'] for alert in run.summary['alerts']}) or 'no rule'}")


def forecasts_before_acquisition(run: ExampleRun, share: float = 0.75) -> list[dict[str, Any]]:
    """Forecasts made at or before ``share`` of the time to acquisition with ``step < low <= predicted <= high``
    (a finite prediction; ``high`` may be open), every forecaster's."""
    acquired = run.acquisition_step
    assert acquired is not None
    made = [dict(record, rule=rule) for rule, records in run.summary.get("forecasts", {}).items()
            for record in records]
    return [f for f in made if f["step"] <= share * acquired and f["predicted"] is not None
            and f["low"] is not None and f["step"] < f["low"] <= f["predicted"]
            and (f["high"] is None or f["predicted"] <= f["high"])]


def check_forecast_before_acquisition(run: ExampleRun) -> None:
    """Issue 28's condition as written: a forecast at or before 75% of the time to acquisition with
    ``step < low <= predicted <= high``."""
    found = forecasts_before_acquisition(run)
    made = {rule: [(f["step"], f["predicted"]) for f in records[:3]]
            for rule, records in run.summary.get("forecasts", {}).items()}
    assert found, (f"no forecast at or before 75% of the time to acquisition ({run.acquisition_step}) with "
                   f"step < low <= predicted <= high; forecasters' first forecasts: {made or 'none'}")


def check_forecast_holds_acquisition(run: ExampleRun) -> None:
    """More than the condition (which a useless forecast can meet): the first forecast that meets it has an
    interval holding the actual acquisition step."""
    found = forecasts_before_acquisition(run)
    assert found, f"no forecast at or before 75% of the time to acquisition ({run.acquisition_step})"
    first = min(found, key=lambda f: f["step"])
    high = math.inf if first["high"] is None else first["high"]
    assert first["low"] <= run.acquisition_step <= high, (
        f"{first['rule']} at step {first['step']}: {first['predicted']:.0f} [{first['low']:.0f}, {high:.0f}], "
        f"acquisition at {run.acquisition_step}")


def has_inputs(run: ExampleRun, needs: Needs) -> bool:
    """Whether the run recorded everything a rule declares it needs (:class:`~capgeo_callbacks.rules.Needs`):
    series tags, tag prefixes, alternatives, or run facts (top-level summary fields such as ``chance``)."""
    return not needs.missing(set(run.summary["series"]), run.summary)


def check_rules_alert_or_say_why(run: ExampleRun) -> None:
    """Every default rule the run ran either raised an alert, or had every input it declares (``Rule.needs``) and
    stayed silent, or said once why it could not run (one message naming it)."""
    needs = {rule.name: rule.needs for rule in default_rules()}
    alerted = {alert["rule"] for alert in run.summary["alerts"]}
    unexplained = []
    for rule in run.summary["rules"]:
        said = [message for message in run.messages if f"rule {rule!r}" in message]
        fed = rule in needs and has_inputs(run, needs[rule])
        if rule not in alerted and not fed and len(said) != 1:
            unexplained.append(f"{rule} (needs {needs.get(rule, '?')}; {len(said)} messages name it)")
    assert not unexplained, (f"rules that neither alerted, nor had their inputs, nor said once why: {unexplained}; "
                             f"alerts from {sorted(alerted) or 'no rule'}")


def check_nothing_skipped(run: ExampleRun) -> None:
    skipped = [message for message in run.messages if "skipped" in message]
    assert not skipped, f"capgeo skipped work on a standard batch: {skipped}"
