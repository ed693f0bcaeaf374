"""A series' fall from its highest value so far, held for some evaluations: the plainest warning a loss curve or a
RankMe curve gives.

``val-loss-fall``: the validation loss 10% below its highest value so far for 3 evaluations in a row (on grokking
runs it falls before the jump in validation accuracy, and on runs that never grok too, later: which is why its
operating point is chosen under a false-alarm cap, :mod:`capgeo_callbacks.scoring.leads`). ``rankme-fall``: the
deepest layer's RankMe 10% below its highest value since step 50 (the warm-up's dip ignored).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from capgeo_callbacks.detection.alerts import Alert
from capgeo_callbacks.detection.settings import ALERT_LAYERS
from capgeo_callbacks.keys import ACC, VAL_LOSS
from capgeo_callbacks.rules.base import Needs, Rule, RuleOutput, RunView

__all__ = ["FallFromPeakRule"]


class FallFromPeakRule(Rule):
    """Warns once, when a series has stood at least ``fall`` below its highest value so far for ``held`` of its
    measured values in a row, the latest at this evaluation; values before step ``ignore_steps`` count for neither
    the peak nor the fall.

    Args:
        key: the series' tag (``val/loss``), or a tag prefix ending in ``/`` (``rankme/``) whose layers ``layer``
            chooses among.
        fall: the fall below the peak, as a share of it, in (0, 1): 0.1 is "10% below its highest value so far".
        held: how many consecutive measured values must stand that far below, >= 1.
        ignore_steps: values logged before this step are ignored (a learning-rate warm-up's dip), >= 0.
        layer: with a prefix: ``"deepest"``, the last layer the run records under it; ``"any"``, the first layer to
            fall; or a layer's name.
        name: how the rule is named (default ``fall-from-peak``).

    Raises:
        ValueError: on a bad argument.
    """

    name = "fall-from-peak"

    def __init__(self, key: str = VAL_LOSS, fall: float = 0.1, held: int = 3, ignore_steps: int = 0,
                 layer: str = "deepest", name: str | None = None) -> None:
        if not isinstance(key, str) or not key or key == "/":
            raise ValueError(f"key must be a series' tag or a tag prefix ending in '/', got {key!r}")
        if isinstance(fall, bool) or not isinstance(fall, (int, float)) or not 0 < fall < 1:
            raise ValueError(f"fall must be a share of the peak in (0, 1) (0.1: 10% below it), got {fall!r}")
        if isinstance(held, bool) or not isinstance(held, int) or held < 1:
            raise ValueError(f"held must be an integer >= 1 (consecutive values), got {held!r}")
        if isinstance(ignore_steps, bool) or not isinstance(ignore_steps, int) or ignore_steps < 0:
            raise ValueError(f"ignore_steps must be an integer >= 0, got {ignore_steps!r}")
        if not isinstance(layer, str) or not layer:
            raise ValueError(f"layer must be one of {', '.join(ALERT_LAYERS)} or a layer's name, got {layer!r}")
        self.key, self.fall, self.held, self.ignore_steps, self.layer = key, float(fall), held, ignore_steps, layer
        if name:
            self.name = name

    @property
    def needs(self) -> Needs:  # type: ignore[override]
        if not self.key.endswith("/"):
            return Needs(series=(ACC, self.key))
        return Needs(series=(ACC, f"{self.key}*" if self.layer in ALERT_LAYERS else f"{self.key}{self.layer}"))

    def _tags(self, run: RunView) -> list[str]:
        if not self.key.endswith("/"):
            return [self.key]
        tags = run.tags(self.key)
        return tags[-1:] if self.layer == "deepest" else tags if self.layer == "any" else \
            [tag for tag in tags if tag == f"{self.key}{self.layer}"]

    def _fallen(self, run: RunView, tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``tag`` over ``run``: where it is measured (``keep``, per evaluation), its measured values, their highest
        value so far, and whether the rule holds with each measured value the latest (``held`` in a row fallen)."""
        values = np.asarray(run.values(tag), dtype=float)
        keep = np.isfinite(values) & (np.asarray(run.steps) >= self.ignore_steps)
        kept = values[keep]
        peaks = np.maximum.accumulate(kept)
        fallen = (peaks > 0) & (kept <= (1.0 - self.fall) * peaks)
        in_a_row = np.concatenate([[0], np.cumsum(fallen)])
        holds = np.arange(1, len(kept) + 1) >= self.held
        holds[holds] = (in_a_row[self.held:] - in_a_row[:-self.held]) == self.held
        return keep, kept, peaks, holds

    def _alert(self, run: RunView, tag: str, kept: float, peak: float) -> Alert:
        layer = tag[len(self.key):] if self.key.endswith("/") else ""
        return self.alert(run, f"{tag} at {kept:.4g}, at least {self.fall:.0%} below its highest value {peak:.4g} "
                               f"for {self.held} value{'s' if self.held > 1 else ''}", layer=layer)

    def update(self, run: RunView, raised: Sequence[Alert]) -> RuleOutput:
        if raised:
            return RuleOutput()
        for tag in self._tags(run):
            keep, kept, peaks, holds = self._fallen(run, tag)
            if keep[-1] and holds[-1]:  # a value at this evaluation, the latest of held fallen in a row
                return RuleOutput(alerts=[self._alert(run, tag, kept[-1], peaks[-1])])
        return RuleOutput()

    def first_run_alert(self, run: RunView, prefixes: Sequence[RunView] | None = None) -> Alert | None:
        """The first alert of a replay, in one pass: the rule holds at an evaluation on the series so far alone
        (the peak is the highest value so far), so the earliest evaluation where a tag holds is the replay's, and at
        that evaluation the first such tag in ``_tags``' order."""
        first: tuple[int, str, float, float] | None = None
        for tag in self._tags(run):
            keep, kept, peaks, holds = self._fallen(run, tag)
            found = np.flatnonzero(holds)
            if len(found):
                j = found[0]
                end = int(np.flatnonzero(keep)[j])  # the evaluation of the j-th measured value
                if first is None or end < first[0]:
                    first = end, tag, kept[j], peaks[j]
        if first is None:
            return None
        end, tag, value, peak = first
        return self._alert(run.prefix(end + 1), tag, value, peak)

    def settings(self) -> dict[str, Any]:
        return {"key": self.key, "fall": self.fall, "held": self.held, "ignore_steps": self.ignore_steps,
                "layer": self.layer, "name": self.name}

