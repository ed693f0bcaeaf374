"""Revisions: the saved states of one model, in training order.

Two kinds are read: Lightning ``.ckpt`` files (ordered by the ``global_step`` they record) and Hugging
Face ``save_pretrained`` folders (ordered by the step in their name: ``step1000``, ``checkpoint-500``).
Each revision's weights are hashed, so that revisions holding identical weights (public Pythia revisions
contain such duplicates) are found: RankMe cannot change between them.

Checkpoints are unpickled with ``weights_only=True`` unless ``allow_pickle`` is set (only for files you
trust).
"""

from __future__ import annotations

import hashlib
import pickle
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

__all__ = [
    "Revision",
    "duplicate_groups",
    "find_revisions",
    "load_checkpoint",
    "step_from_name",
    "weights_sha256",
]

_STEP = re.compile(r"(?:step|checkpoint|ckpt|iter)[-_=]?(\d+)", re.IGNORECASE)  # step1000, checkpoint-500
_NUMBER = re.compile(r"(\d+)(?!.*\d)")  # else the last number in a name


@dataclass(frozen=True)
class Revision:
    """One saved revision of a model.

    Attributes:
        name: file or folder name (``last.ckpt``, ``step1000``).
        path: where it is.
        kind: ``"lightning"`` (a ``.ckpt`` file) or ``"hf"`` (a ``save_pretrained`` folder).
        step: its training step (``global_step`` of a checkpoint, the number in an HF folder's name).
    """

    name: str
    path: Path
    kind: Literal["lightning", "hf"]
    step: int


def find_revisions(paths: str | Path | Sequence[str | Path], allow_pickle: bool = False) -> list[Revision]:
    """The revisions under ``paths``, ordered by step (then ``last*`` after the others, then name).

    Each path is a ``.ckpt`` file, a folder of them (or with a ``checkpoints/`` subfolder), a Hugging Face
    model folder (with ``config.json``), or a folder of such folders named with their step
    (``step1000/``). Steps of checkpoints come from their ``global_step``.

    Raises:
        FileNotFoundError: if a path does not exist or holds no revision.
        ValueError: if Lightning checkpoints and Hugging Face folders are mixed, or an HF folder name has
            no number to order it by.
    """
    given = [paths] if isinstance(paths, (str, Path)) else list(paths)
    found: list[Revision] = []
    for raw in given:
        path = Path(raw)
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist")
        found += _revisions_in(path, allow_pickle)
    if not found:
        raise FileNotFoundError(f"no .ckpt files or Hugging Face model folders under {', '.join(map(str, given))}")
    kinds = {r.kind for r in found}
    if len(kinds) > 1:
        raise ValueError("found both Lightning checkpoints and Hugging Face folders; analyse one kind at a time: "
                         + ", ".join(f"{r.name} ({r.kind})" for r in found[:6]))
    unique = {r.path.resolve(): r for r in found}  # a path given twice counts once
    return sorted(unique.values(), key=lambda r: (r.step, r.name.startswith("last"), r.name))


def _revisions_in(path: Path, allow_pickle: bool) -> list[Revision]:
    if path.is_file():
        if path.suffix != ".ckpt":
            raise ValueError(f"{path} is not a Lightning .ckpt file or a folder")
        return [Revision(path.name, path, "lightning", _checkpoint_step(path, allow_pickle))]
    ckpts = sorted(path.glob("*.ckpt")) or sorted(path.glob("checkpoints/*.ckpt"))
    if ckpts:
        return [Revision(p.name, p, "lightning", _checkpoint_step(p, allow_pickle)) for p in ckpts]
    if (path / "config.json").is_file():  # a single HF model folder
        match = _STEP.search(path.name)  # "pythia-70m" is not step 70
        return [Revision(path.name, path, "hf", int(match.group(1)) if match else 0)]
    subfolders = sorted(p for p in path.iterdir() if p.is_dir() and (p / "config.json").is_file())
    return [Revision(p.name, p, "hf", step_from_name(p.name)) for p in subfolders]


def step_from_name(name: str) -> int:
    """The step in a revision folder's name: after ``step``/``checkpoint``/``iter``, else its last number.

    Raises:
        ValueError: if the name has no number.
    """
    match = _STEP.search(name) or _NUMBER.search(name)
    if match is None:
        raise ValueError(f"cannot order revision folder {name!r}: its name has no step number (e.g. step1000)")
    return int(match.group(1))


def load_checkpoint(path: Path, allow_pickle: bool = False) -> dict[str, Any]:
    """A Lightning checkpoint dict on the CPU, memory-mapped where possible (only the parts read are paged in).

    Raises:
        ValueError: if the file holds objects ``weights_only`` loading refuses (the message names
            ``--allow-pickle``).
    """
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=not allow_pickle, mmap=True)
        except RuntimeError as err:  # not a zip archive (legacy format): no mmap
            if "mmap" not in str(err) and "zip" not in str(err):
                raise
            return torch.load(path, map_location="cpu", weights_only=not allow_pickle)
    except pickle.UnpicklingError as err:
        if allow_pickle:
            raise
        raise ValueError(f"{path} holds objects that weights_only loading refuses ({type(err).__name__}); if you "
                         "trust the file, pass --allow-pickle (allow_pickle=True)") from err


def _checkpoint_step(path: Path, allow_pickle: bool) -> int:
    checkpoint = load_checkpoint(path, allow_pickle)
    if "global_step" in checkpoint:
        return int(checkpoint["global_step"])
    match = re.search(r"step=(\d+)", path.name)
    if match is None:
        raise ValueError(f"{path} records no global_step and its name has no 'step=N'")
    return int(match.group(1))


def weights_sha256(state_dict: Mapping[str, Tensor]) -> str:
    """sha256 over a state dict: each key, dtype, shape and the raw bytes of its tensor, in sorted key order.

    Two revisions with the same digest hold bit-identical weights.
    """
    digest = hashlib.sha256()
    for key in sorted(state_dict):
        value = state_dict[key]
        if not isinstance(value, Tensor):
            continue
        tensor = value.detach().to("cpu").contiguous()
        digest.update(f"{key}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        # viewed as bytes, so every dtype (bfloat16 too) hashes without a numpy conversion
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def duplicate_groups(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Groups of two or more revisions with the same ``weights_sha256``, in the order first seen.

    Args:
        entries: revision entries with ``name``, ``step`` and ``weights_sha256``.

    Returns:
        One ``{"weights_sha256", "revisions": [names], "steps": [steps]}`` per group.
    """
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for entry in entries:
        groups.setdefault(entry["weights_sha256"], []).append(entry)
    return [{"weights_sha256": digest, "revisions": [m["name"] for m in members],
             "steps": [m["step"] for m in members]}
            for digest, members in groups.items() if len(members) > 1]
