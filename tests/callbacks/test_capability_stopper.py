"""CapabilityStopper, the Lightning adapter of the stopping policy: its one decision on known series, the same decision
through the Tune stopper on a recorded run, and real runs: a shuffled-answer run is stopped (as an Optuna pruner) and a
learnable one reaches its stop step; on a user's run that logs only val/acc and val/loss, a late learner is not
stopped and a shuffled-label run is."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import Trainer, seed_everything
from torch.utils.data import DataLoader, TensorDataset

from capgeo_callbacks import EvaluationSchedule, PrecursorDetector
from capgeo_callbacks.callbacks.capability_stopper import CapabilityStopper
from capgeo_callbacks.detection import Chance
from capgeo_callbacks.integrations.tuning import TuneCapabilityStopper
from capgeo_callbacks.rules import ClockForecaster, RunView, StoppingPolicy, default_rules
from capgeo_callbacks.scoring import load_runs
from tests.examples.helpers import load_example

CORPUS = Path(__file__).resolve().parents[2] / "study" / "corpus"
CHANCE = Chance(exact=0.01, token_acc=0.1, logprob=-2.3, logprob_sd=0.5, tokens=4096, questions=512).to_dict()


def view(acc: list[float], logprob: list[float], token_acc: list[float] | None = None,
         max_steps: int = 1000) -> RunView:
    steps = [100 * i for i in range(len(acc))]
    series = {"val/logprob": [[s, v] for s, v in zip(steps, logprob, strict=True)]}
    if token_acc is not None:
        series["val/token_acc"] = [[s, v] for s, v in zip(steps, token_acc, strict=True)]
    return RunView.from_points([[s, a] for s, a in zip(steps, acc, strict=True)], series,
                               {"max_steps": max_steps, "warmup_steps": 0, "chance": CHANCE, "task": "copy",
                                "difficulty": "hard"})


def test_no_learning_onset_by_the_set_share_of_the_budget_stops() -> None:
    stopper = CapabilityStopper(forecaster=None)  # the onset reason alone
    flat = [-2.3] * 4
    assert stopper.should_stop(view([0.0] * 2, flat[:2])) == (False, "may still arrive")  # before 25% of 1000
    stop, reason = stopper.should_stop(view([0.0] * 4, flat))
    assert stop and reason.startswith("no learning onset (loss-onset) by step 300, 30% of the budget of 1000")
    learning = [-2.3, -1.5, -1.0, -0.8]  # far above the chance level: learning started
    assert not stopper.should_stop(view([0.0] * 4, learning))[0]
    assert not stopper.should_stop(RunView.from_points([[0, 0.0], [300, 0.0]], {}, {"max_steps": 1000}))[0], \
        "a run that logs no log-prob is never stopped for lack of an onset"


def test_a_forecast_beyond_the_budget_stops_after_patience_evaluations() -> None:
    learning = [-2.3, -1.5, -1.4, -1.3, -1.2, -1.1]
    table = {"copy/hard": [2500.0]}  # a clock that puts acquisition at step 2,500, past the budget of 1,000
    clock = ClockForecaster(horizon=None)
    clock.set_fitted(table=table)
    stopper = CapabilityStopper(forecaster=clock, onset_rule=None, patience=3)
    assert not stopper.should_stop(view([0.0] * 2, learning[:2]))[0]  # before a quarter of the budget
    stop, reason = stopper.should_stop(view([0.0] * 6, learning))
    assert stop and reason == "clock forecasts acquisition at step 2500, beyond 1 x the budget of 1000, at 3 " \
                              "evaluations in a row"
    early = ClockForecaster(horizon=None)
    early.set_fitted(table={"copy/hard": [900.0]})
    assert not CapabilityStopper(forecaster=early, onset_rule=None).should_stop(view([0.0] * 6, learning))[0]
    acquired = [0.0, 0.2, 0.6, 0.7, 0.8, 0.8]
    assert stopper.should_stop(view(acquired, learning)) == (False, "acquired")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"decide_from": 1.5}, "decide_from must be a share of the budget"),
    ({"reach": 0}, "reach must be > 0"),
    ({"patience": 0}, "patience must be at least 1"),
    ({"plateau_by": -0.1}, "plateau_by must be a share of the budget"),
    ({"forecaster": "token_acc"}, "forecaster must be a capgeo_callbacks.rules.Rule"),
    ({"budget": 0}, "budget must be at least 1 step"),
])
def test_bad_settings_are_clear_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CapabilityStopper(**kwargs)


def test_the_tune_stopper_decides_as_the_callback_on_a_recorded_run() -> None:
    [run] = [r for r in load_runs(CORPUS / "heldout") if r.name.endswith("add-hard-xs-s100.json.gz")]
    stopper = CapabilityStopper()
    step, reason = stopper.policy.replay(run.view)
    assert step is not None and step < run.view.max_steps and run.acquisition is None
    tune_stopper = TuneCapabilityStopper(stopper.policy)
    info = {key: run.view.info[key] for key in ("max_steps", "warmup_steps", "chance", "task", "difficulty")}
    stopped_at = None
    for i, at in enumerate(run.view.steps):  # the results TuneReportCallback reports, one per evaluation
        result = {"step": at, "val/acc": run.view.values("acc")[i], "capgeo/info": info}
        result.update({tag: run.view.values(tag)[i] for tag in ("val/token_acc", "val/logprob")
                       if math.isfinite(run.view.values(tag)[i])})
        if tune_stopper("trial_0", result):
            stopped_at = at
            break
    assert (stopped_at, tune_stopper.reasons["trial_0"]) == (step, reason)


@pytest.mark.slow
def test_a_shuffled_run_is_pruned_and_a_learnable_one_reaches_its_stop_step(tmp_path: Path) -> None:
    optuna = pytest.importorskip("optuna")
    import train
    from capgeo_callbacks.integrations.tuning import OptunaCapabilityPruner

    def run(name: str, *extra: str, callbacks: list[Any]) -> dict[str, Any]:
        return train.main(["--task", "copy", "--difficulty", "easy", "--max-steps", "200", "--eval-points", "40",
                           "--measures", "none", "--logdir", str(tmp_path), "--name", name, "--no-progress", *extra],
                          callbacks=callbacks)

    def objective(trial: Any) -> float:
        return run("shuffled", "--shuffle-answers", callbacks=[OptunaCapabilityPruner(trial)])["final_acc"]

    study = optuna.create_study(direction="maximize")
    study.optimize(objective, n_trials=1)
    [pruned] = study.trials
    assert pruned.state == optuna.trial.TrialState.PRUNED
    assert pruned.intermediate_values and max(pruned.intermediate_values) == 50  # val/acc by step, up to the stop

    stopper = CapabilityStopper()
    learned = run("learnable", callbacks=[stopper])
    assert learned["steps"] == 200 and learned["acquisition_step"] is not None
    assert stopper.stopped_step is None and stopper.stopped_reason is None


def test_the_policy_s_settings_are_its_rules_records_and_round_trip() -> None:
    policy = StoppingPolicy(patience=4, plateau_by=0.6).without(forecast=True)
    settings = policy.settings()
    assert settings["forecaster"] is None and settings["onset_rule"]["class"].endswith("baselines.LossOnsetRule")
    assert StoppingPolicy.from_settings(settings).settings() == settings
    assert CapabilityStopper(policy=policy).settings() == settings  # the callback holds nothing of its own
    with pytest.raises(ValueError, match="unknown stopping settings \\['threshold'\\]"):
        StoppingPolicy.from_settings({"threshold": 0.5})


def user_run(root: Path, shuffled: bool, max_steps: int = 600) -> tuple[CapabilityStopper, PrecursorDetector]:
    """examples/own_model.py's model and task, as a user runs them: logging val/acc and val/loss only, no chance
    level, no warm-up told; with ``shuffled``, the training answers permuted (nothing to learn)."""
    example = load_example("own_model")
    seed_everything(0, verbose=False)
    train, val = example.data(0)
    if shuffled:
        inputs, targets = train.dataset.tensors
        targets = targets.clone()
        targets[:, -1] = targets[torch.randperm(len(targets), generator=torch.Generator().manual_seed(0)), -1]
        train = DataLoader(TensorDataset(inputs, targets), batch_size=64, shuffle=True)
    stopper, detector = CapabilityStopper(), PrecursorDetector(monitor="val/acc", rules=default_rules())
    trainer = Trainer(max_steps=max_steps, default_root_dir=root, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[EvaluationSchedule(points=64), detector, stopper])
    trainer.fit(example.TinyLM(), train, val)
    return stopper, detector


@pytest.mark.slow
def test_on_a_run_logging_only_accuracy_and_loss_a_late_learner_goes_on_and_shuffled_labels_stop(
        tmp_path: Path) -> None:
    late, detector = user_run(tmp_path / "late", shuffled=False)
    chance_for = [step for step, acc in detector.acc if acc < 0.1]  # 1/23 is chance
    assert chance_for[-1] >= 150, "the learner sits at chance for its first quarter"
    assert late.stopped_step is None and detector.acquired_step is not None
    assert detector.session.summary.get("stopped") is None

    shuffled, detector = user_run(tmp_path / "shuffled", shuffled=True)
    assert shuffled.stopped_step is not None and 300 <= shuffled.stopped_step < 600
    assert shuffled.stopped_reason.startswith("no learning onset (acc-onset)")
    assert detector.session.summary["stopped"]["reason"] == shuffled.stopped_reason


def test_the_stopper_reads_the_detector_listed_before_it_or_handed_to_it(tmp_path: Path) -> None:
    """It decides on the validation its detector has just recorded, so the detector comes first (found where it
    joined the Trainer, or handed over); a detector listed after it, or none, is a clear error before training."""
    from tests.callbacks.conftest import ForeignEncoder, loaders

    def fit(*callbacks: Any) -> Trainer:
        seed_everything(0, verbose=False)
        trainer = Trainer(max_steps=16, val_check_interval=8, logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                          default_root_dir=tmp_path, callbacks=list(callbacks))
        trainer.fit(ForeignEncoder(), *loaders())
        return trainer

    def detector() -> PrecursorDetector:
        return PrecursorDetector(monitor="val_acc", logprob_monitor=None, overhead_budget=None)

    first, given = detector(), detector()
    for stopper, listed in ((CapabilityStopper(), [first]), (CapabilityStopper(detector=given), [given])):
        fit(*listed, stopper)
        assert stopper.engine is listed[-1].engine
        # it decided at a validation its detector had recorded
        assert stopper.stopped_step in (None, *(step for step, _ in listed[-1].acc))
    for callbacks, message in [([CapabilityStopper(), detector()], "list that detector among the Trainer's callbacks, "
                                 "before the CapabilityStopper"),
                               ([CapabilityStopper()], "reads the run that a PrecursorDetector updates"),
                               ([detector(), CapabilityStopper(detector=detector())], "the detector it was given")]:
        with pytest.raises(ValueError, match=message):
            fit(*callbacks)
