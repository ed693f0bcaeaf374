"""capgeo in hyperparameter engines: report a run to Ray Tune, and the stopping policy
(:class:`~capgeo_callbacks.rules.stopping.StoppingPolicy`) as a Tune stopper and an Optuna pruner. Ray and Optuna are
imported only when these run (``pip install 'capgeo-callbacks[sweep]'``).

- :class:`TuneReportCallback`: a Lightning callback that reports each evaluation to Tune from the run's view (the
  :class:`~capgeo_callbacks.PrecursorDetector`'s session): ``val/acc``, ``val/token_acc``, ``val/logprob``,
  ``val/loss``, each layer's RankMe, each forecaster's ``forecast/<rule>`` and what a stopper needs to rebuild the run
  (``capgeo/info``).
- :class:`TuneCapabilityStopper`: ``RunConfig(stop=TuneCapabilityStopper())``: rebuilds each trial's series from
  its reports and asks the policy's ``should_stop``; for trials whose reports carry those series (the reporter
  above, or a user's own ``tune.report`` with the same keys).
- :class:`OptunaCapabilityPruner`: a Lightning callback, modelled on Optuna's ``PyTorchLightningPruningCallback``:
  it reports ``val/acc`` to the Optuna trial at each evaluation and raises ``optuna.TrialPruned`` with the
  policy's reason when it says stop (the :class:`~capgeo_callbacks.callbacks.capability_stopper.CapabilityStopper`'s
  decision, with a pruned trial instead of a stopped fit).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from capgeo_callbacks.callbacks.capability_stopper import CapabilityStopper
from capgeo_callbacks.engine.joined import joined
from capgeo_callbacks.engine.run import RunEngine
from capgeo_callbacks.keys import FORECAST, RANKME
from capgeo_callbacks.rules import RunView
from capgeo_callbacks.rules.stopping import StoppingPolicy

__all__ = ["OptunaCapabilityPruner", "TuneCapabilityStopper", "TuneReportCallback"]

REPORTED = ("val/acc", "val/token_acc", "val/logprob", "val/loss")  # the series a stopper rebuilds a run from
INFO = ("max_steps", "warmup_steps", "chance", "task", "difficulty")  # what the rules read of the run's info


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


class TuneReportCallback(Callback):
    """Report each evaluation of the run to Ray Tune (module docstring); reads the
    :class:`~capgeo_callbacks.PrecursorDetector`'s record, so it needs one listed before it among the trainer's
    callbacks (checked at ``setup``)."""

    engine: RunEngine | None = None  # the run it reports, found at setup

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self.engine = joined(trainer).engine_before(type(self).__name__)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit" or not trainer.is_global_zero or self.engine is None:
            return
        from ray import tune

        view = self.engine.session.view
        run = view.run
        if not run.steps or run.step != trainer.global_step:
            return
        metrics: dict[str, Any] = {"step": run.step, "val/acc": run.last("acc")}
        for tag in (*REPORTED[1:], *run.tags(RANKME)):
            if (value := _finite(run.last(tag))) is not None:
                metrics[tag] = value
        for rule, made in view.forecasts.items():
            metrics[f"{FORECAST}{rule}"] = made.predicted  # inf: not within reach
        metrics["capgeo/info"] = {key: run.info[key] for key in INFO if key in run.info}
        tune.report(metrics)


class TuneCapabilityStopper:
    """A Ray Tune stopper (``RunConfig(stop=...)``) that asks the stopping policy about each trial.

    Tune calls it with each result; it keeps each trial's reported series (``step`` and the keys of
    :class:`TuneReportCallback`) and stops a trial when the policy's ``should_stop`` says so.

    Args:
        policy: the decision (default :class:`~capgeo_callbacks.rules.stopping.StoppingPolicy()`).
    """

    def __init__(self, policy: StoppingPolicy | None = None) -> None:
        self.policy = policy or StoppingPolicy()
        self.history: dict[str, list[Mapping[str, Any]]] = {}
        self.reasons: dict[str, str] = {}

    def view(self, trial_id: str) -> RunView:
        results = [r for r in self.history.get(trial_id, []) if "step" in r and "val/acc" in r]
        acc = [[int(r["step"]), float(r["val/acc"])] for r in results]
        tags = {tag for r in results for tag in r if tag in REPORTED[1:] or tag.startswith(RANKME)}
        series = {tag: [[int(r["step"]), float(r[tag])] for r in results if r.get(tag) is not None] for tag in tags}
        info = next((r["capgeo/info"] for r in reversed(results) if r.get("capgeo/info")), {})
        return RunView.from_points(acc, series, info)

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        self.history.setdefault(trial_id, []).append(dict(result))
        if "val/acc" not in result:
            return False
        stop, reason = self.policy.should_stop(self.view(trial_id))
        if stop:
            self.reasons[trial_id] = reason
        return stop

    def stop_all(self) -> bool:
        return False


class OptunaCapabilityPruner(CapabilityStopper):
    """Prune an Optuna trial whose capability will not arrive within its budget (module docstring): the
    :class:`CapabilityStopper` adapter of the policy, raising ``optuna.TrialPruned`` where it would stop the fit.

    Args:
        trial: the ``optuna.trial.Trial`` of this run.
        monitor: the value reported to Optuna at each evaluation (its intermediate values).
        **settings: the :class:`CapabilityStopper`'s (its policy's settings, or ``policy=``).
    """

    def __init__(self, trial: Any, monitor: str = "val/acc", **settings: Any) -> None:
        super().__init__(**settings)
        self.trial, self.monitor = trial, monitor

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        import optuna

        score = trainer.callback_metrics.get(self.monitor)
        if score is not None:
            self.trial.report(float(score), step=trainer.global_step)
        super().on_validation_end(trainer, pl_module)
        if self.stopped_reason is not None:
            raise optuna.TrialPruned(f"pruned at step {self.stopped_step}: {self.stopped_reason}")
