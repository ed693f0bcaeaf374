"""A trial that calls a user's training function: Ray Tune's function trainable, ``fn(config) -> None``.

    from capgeo_callbacks.sweeps import function_trials, launch
    launch(function_trials("mypackage.train:train", {"lr": [1e-3, 3e-3], "seed": [0, 1]}, "runs/grid"))

The function knows nothing of the launcher. It is called with the grid point's settings and two reserved keys:

- ``config["trial_dir"]`` (str): the trial's own folder; the function writes its logger's folders, its
  checkpoints and capgeo's summary under it;
- ``config["resume_from"]`` (str or None): the checkpoint to resume from, ``<trial_dir>/checkpoints/last.ckpt``
  where an interrupted start left one (what Lightning's ``ModelCheckpoint(dirpath=trial_dir / "checkpoints",
  save_last=True)`` writes; with ``save_on_train_epoch_end=False``, after each evaluation: docs/sweeps.md), else
  None: pass it to ``trainer.fit(..., ckpt_path=config["resume_from"])``.

The launcher keeps its record of the trial in ``<trial_dir>/capgeo_trial.json`` (the function and settings, the
threads, the commit of the code it was launched from, one entry per start); once the function has returned, the trial
is finished (:func:`capgeo_callbacks.sweeps.trials.run_state`, the one definition).
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from capgeo_callbacks.sweeps.trials import (
    LAST_CHECKPOINT,
    PROVENANCE,
    TRIAL_RECORD,
    Kind,
    State,
    Trial,
    read_trial_record,
    run_state,
    source_provenance,
    summary_of,
)

__all__ = ["RESERVED_KEYS", "FunctionTrial", "TrainingFunction", "function_name", "function_trials",
           "resolve_function", "trial_name"]

RESERVED_KEYS = ("trial_dir", "resume_from")  # the keys of config the launcher sets for every trial
TrainingFunction = Callable[[dict[str, Any]], Any]


def resolve_function(spec: str | TrainingFunction) -> TrainingFunction:
    """The training function ``spec`` names: a callable as it is, or ``"package.module:function"`` imported.

    Raises:
        ValueError: on a malformed path, a module that does not import, a missing attribute, or something that is
            not a function of one argument (the config).
    """
    if isinstance(spec, str):
        module_name, colon, attribute = spec.partition(":")
        if not colon or not module_name or not attribute:
            raise ValueError(f"a training function is named 'package.module:function', got {spec!r}")
        try:
            found: Any = importlib.import_module(module_name)
        except ImportError as err:
            raise ValueError(f"cannot import {module_name!r} for the training function {spec!r}: {err} (is it on "
                             f"PYTHONPATH, or installed?)") from err
        for part in attribute.split("."):
            if not hasattr(found, part):
                raise ValueError(f"{module_name} has no {attribute!r} (the training function {spec!r})")
            found = getattr(found, part)
    else:
        found = spec
    if not callable(found):
        raise ValueError(f"the training function {spec!r} is not callable")
    try:
        inspect.signature(found).bind({})
    except TypeError as err:
        raise ValueError(f"the training function {function_name(found)} must take one argument, the trial's config "
                         f"(Ray Tune's function trainable, fn(config)): {err}") from err
    except ValueError:  # no signature to read (a builtin): the call will tell
        pass
    return found


def check_reserved(keys: Iterable[str], what: str) -> None:
    """Raise a ValueError naming the reserved keys among ``keys`` (``what`` says whose)."""
    reserved = [key for key in RESERVED_KEYS if key in keys]
    if reserved:
        raise ValueError(f"{what} {', '.join(map(repr, reserved))} is reserved: the launcher sets config['trial_dir'] "
                         "(the trial's folder) and config['resume_from'] (its checkpoint or None); rename it")


def function_name(function: str | TrainingFunction) -> str:
    """``module:qualified.name`` of a training function (a path as given)."""
    if isinstance(function, str):
        return function
    return f"{getattr(function, '__module__', '?')}:{getattr(function, '__qualname__', repr(function))}"


def import_root(function: str | TrainingFunction) -> Path | None:
    """The folder the function's module is imported from (what its workers need on ``PYTHONPATH``), or None
    (``__main__``, or a module without a file: the engines pickle such a function by value)."""
    module_name = function.partition(":")[0] if isinstance(function, str) else getattr(function, "__module__", None)
    module = sys.modules.get(module_name or "")
    path = getattr(module, "__file__", None)
    if module is None or path is None or module_name == "__main__":
        return None
    root = Path(path).resolve().parent
    for _ in range(module_name.count(".") + (Path(path).name == "__init__.py")):
        root = root.parent
    return root


@dataclass(frozen=True)
class FunctionTrial(Trial):
    """One call of a user's training function, with a folder of its own: ``FunctionTrial(name, function, settings,
    logdir=...)``.

    Attributes:
        function: the training function, or ``"package.module:function"``.
        settings: the config it is called with, less ``trial_dir`` and ``resume_from`` (which it must not hold).
        name, logdir, tags, cpus, gpus: as every :class:`~capgeo_callbacks.sweeps.trials.Trial`.

    Raises:
        ValueError: a reserved key among the settings, a name that is not one folder, or bad resources.
    """

    function: str | TrainingFunction = field(compare=False)
    settings: Mapping[str, Any] = field(hash=False)
    kind: ClassVar[Kind] = "function"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "settings", dict(self.settings))
        check_reserved(self.settings, f"trial {self.name}: setting")

    @property
    def import_roots(self) -> tuple[Path, ...]:
        root = import_root(self.function)
        return () if root is None else (root,)

    def check(self) -> None:
        resolve_function(self.function)

    def state(self) -> tuple[State, str]:
        return run_state(self.root, function=True)

    def config(self, resume: bool) -> dict[str, Any]:
        """What the function is called with: the settings, ``trial_dir`` and ``resume_from``."""
        return {**self.settings, "trial_dir": str(self.root),
                "resume_from": str(self.root / LAST_CHECKPOINT) if resume else None}

    def describe(self, resume: bool) -> str:
        return f"{function_name(self.function)}({json.dumps(self.config(resume), default=str)})"

    def execute(self, resume: bool, callbacks: list[Any]) -> Mapping[str, Any] | None:
        """Call the function; record the start, and its return, in the trial's record."""
        import torch

        if callbacks:
            raise ValueError("extra Lightning callbacks go to command trials; a training function builds its own "
                             "Trainer: add them there")
        function = resolve_function(self.function)
        config = self.config(resume)
        record = read_trial_record(self.root) or {"parts": []}
        provenance = {key: os.environ[key] for key in PROVENANCE if key in os.environ}
        provenance = provenance or source_provenance()
        record.update(function=function_name(self.function), settings=self.settings,
                      threads=torch.get_num_threads(), omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
                      commit=provenance.get("CAPGEO_COMMIT"), tree_clean=provenance.get("CAPGEO_TREE_CLEAN") == "1")
        part: dict[str, Any] = {"resume_from": config["resume_from"], "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
        record["parts"].append(part)
        self._write(record)
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            function(config)
        except BaseException as err:
            part["ended"] = f"raised {type(err).__name__}: {err}"
            raise
        else:
            part["ended"] = "returned"
            record["returned"] = True
        finally:
            part.update(wall_seconds=round(time.perf_counter() - wall, 1),
                        cpu_seconds=round(time.process_time() - cpu, 1))
            self._write(record)
        return summary_of(self)

    def _write(self, record: Mapping[str, Any]) -> None:
        path = self.root / TRIAL_RECORD
        part = path.with_suffix(".part")
        part.write_text(json.dumps(record, indent=1, default=str) + "\n")
        part.replace(path)  # whole or not at all: a kill while writing leaves the previous record


def trial_name(settings: Mapping[str, Any]) -> str:
    """A folder name for a grid point: ``key=value`` joined by commas, in the grid's order (as Ray Tune names its
    trials); characters other than letters, digits and ``.=,+-_`` become ``_``."""
    text = ",".join(f"{key}={_text(value)}" for key, value in settings.items()) or "default"
    return re.sub(r"[^A-Za-z0-9.=,+\-_]", "_", text)


def _text(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:g}"
    return str(value)


def function_trials(function: str | TrainingFunction, grid: Mapping[str, Sequence[Any]], logdir: str | Path,
                    cpus: float = 1.0, gpus: float = 0.0) -> list[FunctionTrial]:
    """One trial per point of ``grid`` (every combination of its values, the first key slowest), named by
    :func:`trial_name`, checked before any runs.

    Args:
        function: the training function, or ``"package.module:function"``.
        grid: each setting's values, e.g. ``{"lr": [1e-3, 3e-3], "seed": [0, 1]}``.
        logdir: the folder of the trials' folders.
        cpus: cores each trial holds (its thread count).
        gpus: the share of a GPU each holds.

    Raises:
        ValueError: a reserved key (``trial_dir``, ``resume_from``), a setting without values, a value not
            a list, a function that cannot be found or called with a config, or two points with one name.
    """
    check_reserved(grid, "grid key")
    for key, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise ValueError(f"grid {key!r}: a list of values, got {values!r}")
        if not values:
            raise ValueError(f"grid {key!r} has no values")
    resolve_function(function)
    points = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    trials = [FunctionTrial(trial_name(point), function, point, logdir=Path(logdir), tags=point, cpus=cpus,
                            gpus=gpus)
              for point in points]
    names = [trial.name for trial in trials]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"grid points share a folder name: {', '.join(repeated)} (values that read alike)")
    return trials
