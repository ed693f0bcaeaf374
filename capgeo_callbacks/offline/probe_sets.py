"""The probe set: the fixed rows every revision is measured on.

Either a ``torch.save``'d file of rows (a dict with ``input_ids`` and optionally ``answer_mask``,
``targets``, ``attention_mask``), or the validation (or test) loader of a datamodule built by a factory
named with a dotted path (the one the run records, else one the user names; resolved at run time), from the
arguments the run records and those given. The monitors use the first ``num_rows`` selected rows of it, as live.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from capgeo_callbacks.offline.dotted import resolve_dotted
from capgeo_callbacks.run.failures import WarnOnce

__all__ = ["ProbeSet", "build_probe_set", "probe_datamodule", "probe_file"]


class _Rows(Dataset):
    """A dict of equal-length tensors, indexable one row at a time."""

    def __init__(self, rows: Mapping[str, Tensor]) -> None:
        self.rows = dict(rows)

    def __len__(self) -> int:
        return self.rows["input_ids"].shape[0]

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return {key: value[i] for key, value in self.rows.items()}


@dataclass
class ProbeSet:
    """The fixed rows every revision is measured on.

    Attributes:
        loader: the unshuffled loader over them.
        description: how it was made (recorded in the summary's ``analysis["probe_set"]``).
        keys: the batch keys (``input_ids``, ``answer_mask``, ...).
    """

    loader: DataLoader
    description: dict[str, Any]
    keys: set[str] = field(default_factory=set)


def probe_file(path: str | Path, batch_size: int) -> ProbeSet:
    """The probe set of a ``torch.save``'d dict of N-row tensors (``input_ids`` N x T, integers).

    Raises:
        ValueError: if the file does not hold such a dict (the message lists the expected keys).
    """
    rows = torch.load(Path(path), map_location="cpu", weights_only=True)
    if not isinstance(rows, Mapping) or "input_ids" not in rows:
        raise ValueError(f"probe file {path} must hold a dict with 'input_ids' (N x T integer tensor), "
                         f"optionally 'answer_mask', 'targets', 'attention_mask'; got "
                         f"{sorted(rows) if isinstance(rows, Mapping) else type(rows).__name__}")
    ids = rows["input_ids"]
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.dtype.is_floating_point:
        raise ValueError(f"probe file {path}: 'input_ids' must be an N x T integer tensor, got "
                         f"{getattr(ids, 'dtype', type(ids).__name__)} of shape {tuple(getattr(ids, 'shape', ()))}")
    tensors = {k: v for k, v in rows.items() if isinstance(v, Tensor)}
    bad = [k for k, v in tensors.items() if v.shape[:1] != ids.shape[:1]]
    if bad:
        raise ValueError(f"probe file {path}: {', '.join(bad)} must have {ids.shape[0]} rows like input_ids")
    loader = DataLoader(_Rows(tensors), batch_size=batch_size, shuffle=False)
    description = {"source": "file", "path": str(path), "examples": int(ids.shape[0]), "keys": sorted(tensors)}
    return ProbeSet(loader, description, set(tensors))


def probe_datamodule(factory_path: str, kwargs: Mapping[str, Any], split: str, notes: list[str]) -> ProbeSet:
    """The ``split`` loader (``"val"`` or ``"test"``) of ``factory(**kwargs)``; only its first loader if it
    has several, as the live monitors read only the first.

    Raises:
        ValueError: if the factory cannot be resolved, rejects the arguments, or its loader is empty.
    """
    factory = resolve_dotted(factory_path)
    try:
        datamodule = factory(**kwargs)
    except TypeError as err:  # a recorded or given argument this factory does not take
        raise ValueError(f"{factory_path}(**{dict(kwargs)}) failed: {err}") from err
    if isinstance(datamodule, pl.LightningDataModule):
        datamodule.prepare_data()
        datamodule.setup("validate" if split == "val" else "test")
    loader = datamodule.val_dataloader() if split == "val" else datamodule.test_dataloader()
    if isinstance(loader, (list, tuple)):
        loader = loader[0]
    first = next(iter(loader), None)
    if first is None:
        raise ValueError(f"the {split} loader of {factory_path}(**{dict(kwargs)}) is empty")
    keys = set(first) if isinstance(first, Mapping) else set()
    description = {"source": "datamodule", "factory": factory_path, "kwargs": dict(kwargs), "split": split,
                   "keys": sorted(keys), "notes": notes}
    dataset = getattr(loader, "dataset", None)
    if dataset is not None and hasattr(dataset, "__len__"):
        description["examples"] = len(dataset)
    return ProbeSet(loader, description, keys)


def build_probe_set(
    *,
    probe_file_path: str | Path | None,
    recorded: Mapping[str, Any],
    sources: list[str],
    task: str | None,
    difficulty: str | None,
    seed: int | None,
    factory: str | None,
    factory_kwargs: Mapping[str, Any] | None,
    split: str,
    batch_size: int,
    kind: str,
    warn: WarnOnce,
) -> ProbeSet:
    """The probe set: the file if given, else the loader of ``factory`` (a dotted path: the one given, else
    the one the run recorded) with the recorded datamodule arguments, overridden by
    ``task``/``difficulty``/``seed`` and then ``factory_kwargs``.

    Raises:
        ValueError: if there is neither a file nor a factory with a task and difficulty (the message says what
            to pass).
    """
    if probe_file_path is not None:
        return probe_file(probe_file_path, batch_size)
    kwargs = dict(recorded)
    for key, value in (("task", task), ("difficulty", difficulty), ("seed", seed)):
        if value is not None:
            kwargs[key] = value
    kwargs.update(dict(factory_kwargs or {}))
    if "task" not in kwargs or "difficulty" not in kwargs:
        raise ValueError("no probe set: pass --probe-file rows.pt, or --task T --difficulty D (built by "
                         "--datamodule-factory MODULE.FUNCTION); " + (
                             "the checkpoint and its run folder record no task" if kind == "lightning" else
                             "Hugging Face folders record no task"))
    if factory is None:
        raise ValueError(f"no datamodule factory to build the probe rows of task {kwargs['task']!r}/"
                         f"{kwargs['difficulty']!r}: pass --datamodule-factory MODULE.FUNCTION (datamodule_factory= "
                         "in Python), or --probe-file rows.pt; the run's summary records no datamodule_factory")
    notes = [f"datamodule arguments from {source}" for source in sources]
    # a datamodule that saved its hyperparameters is rebuilt from them, val_size included
    if sources and "val_size" not in kwargs and not any("hyper_parameters" in s for s in sources):
        warn("val_size", f"the run records task {kwargs['task']!r}/{kwargs['difficulty']!r} but not the "
             "datamodule's val_size: the factory default is used, so the probe rows may differ from the live "
             "run's (pass --datamodule-kwargs '{\"val_size\": N}' to match it)")
    return probe_datamodule(factory, kwargs, split, notes)
