"""The compatibility module: the only home of the frameworks' private names in capgeo, and the Lightning behaviour
the evaluation schedule relies on (read from it, so these run on the oldest Lightning allowed as on the newest)."""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
from lightning.pytorch import Trainer, seed_everything
from torch import nn

from capgeo_callbacks import EvaluationSchedule
from tests.callbacks.helpers import TinyAnswerLM, answer_loaders

PACKAGE = Path(__file__).resolve().parents[2] / "capgeo_callbacks"
COMPAT = PACKAGE / "integrations" / "compat.py"
DOCUMENTED = {"_generate_state_key"}  # Lightning documents overriding it (several instances of one callback)


def private(names: Any) -> set[str]:
    return {name for name in names if name.startswith("_") and not name.startswith("__")} - DOCUMENTED


def framework_private_names() -> tuple[set[str], set[str]]:
    """The private names of the framework objects capgeo meets (instances' attributes, classes' methods), and those
    of the framework classes capgeo subclasses (which it could reach through ``self``)."""
    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    objects: list[Any] = [trainer, trainer.fit_loop, trainer.fit_loop.epoch_loop, trainer.fit_loop.epoch_loop.val_loop,
                          vars(trainer)["_logger_connector"], pl.LightningModule(), nn.Linear(1, 1)]
    bases: list[type] = [pl.Callback, pl.LightningModule, *pl.loggers.Logger.__subclasses__()]
    try:
        import transformers
        from transformers.integrations import MLflowCallback, TensorBoardCallback, WandbCallback
        from transformers.trainer_callback import CallbackHandler
    except ImportError:
        pass
    else:
        objects += [transformers.Trainer, CallbackHandler, TensorBoardCallback]
        for integration in (MLflowCallback, WandbCallback):  # their modules (``_ml_flow``, ``_wandb``), where installed
            with contextlib.suppress(ImportError, RuntimeError):
                objects.append(integration())
        bases.append(transformers.TrainerCallback)
    met = private(name for one in objects for name in (*getattr(one, "__dict__", {}), *dir(type(one)), *dir(one)))
    return met, private(name for base in bases for name in dir(base))


def test_framework_private_names_appear_only_in_the_compatibility_module() -> None:
    met, inherited = framework_private_names()
    assert {"_batches_that_stepped", "_first_loop_iter", "_should_check_val_fx", "_trainer", "_modules"} <= met
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == COMPAT:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            through_self = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id in ("self", "cls")
            if isinstance(node, ast.Attribute) and node.attr in (inherited if through_self else met) or \
                    isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in met:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "framework internals outside capgeo_callbacks/integrations/compat.py:\n" + "\n".join(found)


def fit(path: Path, schedule: EvaluationSchedule, extra: list[pl.Callback], **options: Any) -> list[int]:
    """The steps validated at (from the validation's own hook) in a short run of TinyAnswerLM."""
    seen: list[int] = []

    class Seen(pl.Callback):
        def on_validation_start(self, trainer: Trainer, pl_module: pl.LightningModule) -> None:
            seen.append(trainer.global_step)

    seed_everything(0, verbose=False)
    settings = {"max_steps": 20, "num_sanity_val_steps": 0, "accelerator": "cpu", "logger": False,
                "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False,
                "default_root_dir": path, **options}
    Trainer(callbacks=[schedule, Seen(), *extra], **settings).fit(TinyAnswerLM(), *answer_loaders())
    return seen


@pytest.mark.parametrize("every_n_epochs", [1, None])
def test_the_schedule_decides_every_validation(every_n_epochs: int | None, tmp_path: Path) -> None:
    """Counted in the epoch's batches or the run's, the validations are the scheduled steps, nothing else."""
    options = {"check_val_every_n_epoch": every_n_epochs, "val_check_interval": 1 if every_n_epochs is None else 1.0}
    assert fit(tmp_path, EvaluationSchedule(steps=[0, 3, 4, 17]), [], **options) == [0, 3, 4, 17]


def test_a_stop_requested_mid_epoch_validates_once_more(tmp_path: Path) -> None:
    """Lightning's own rule, kept: a stop asked for after a training batch validates the model it stops at."""

    class StopAt7(pl.Callback):
        def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
            trainer.should_stop = trainer.should_stop or trainer.global_step == 7

    assert fit(tmp_path, EvaluationSchedule(steps=[0, 3, 9]), [StopAt7()]) == [0, 3, 7]


def test_a_time_based_interval_is_refused(tmp_path: Path) -> None:
    try:
        trainer = Trainer(val_check_interval="00:00:00:10", max_steps=4, logger=False, enable_checkpointing=False,
                          callbacks=[EvaluationSchedule(steps=[0, 2])], enable_progress_bar=False)
    except Exception:  # noqa: BLE001 - before Lightning 2.6 an interval is never a time
        pytest.skip("this Lightning takes no time-based val_check_interval")
    with pytest.raises(RuntimeError, match="val_check_interval in batches"):
        trainer.fit(TinyAnswerLM(), *answer_loaders())
