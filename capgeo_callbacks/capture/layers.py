"""Resolving watched layers by module name or glob, and reading their outputs."""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable, Sequence

from torch import Tensor, nn

DEFAULT_LAYERS = ("**.blocks.*", "**.norm_f")  # capgeo's transformer: the residual stream of each block, final norm


def _match(pattern: list[str], name: list[str]) -> bool:
    if not pattern:
        return not name
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_match(rest, name[i:]) for i in range(len(name) + 1))
    return bool(name) and fnmatch.fnmatchcase(name[0], head) and _match(rest, name[1:])


def glob_match(pattern: str, name: str) -> bool:
    """Whether a dotted module name matches a glob.

    ``*`` (and ``?``/``[...]``) match within one dotted component; ``**`` matches any number of
    components, including none: ``blocks.*`` is the blocks, ``**.norm_f`` a ``norm_f`` at any depth.
    """
    return _match(pattern.split("."), name.split(".") if name else [])


def resolve_layers(model: nn.Module, patterns: str | Sequence[str]) -> list[str]:
    """Module names of ``model`` matched by ``patterns``, in ``named_modules()`` (depth) order.

    Raises:
        ValueError: if a pattern matches no module; the message lists the closest module names.
    """
    if isinstance(patterns, str):
        patterns = [patterns]
    if not patterns:
        raise ValueError("no layers to watch: pass at least one module name or glob")
    names = [name for name, _ in model.named_modules() if name]
    matched: set[str] = set()
    for pattern in patterns:
        hits = {name for name in names if glob_match(pattern, name)}
        if not hits:
            raise ValueError(
                f"layer pattern {pattern!r} matches no module; closest: {', '.join(closest_names(pattern, names))}"
            )
        matched |= hits
    return [name for name in names if name in matched]


def closest_names(query: str, names: Iterable[str], limit: int = 5) -> list[str]:
    names = list(names)
    plain = query.replace("*", "")
    close = difflib.get_close_matches(plain, names, n=limit, cutoff=0.3)
    return close or names[:limit]


def short_names(names: Sequence[str]) -> dict[str, str]:
    """Tag names for layers: the full names with their shared leading components removed.

    ``model.blocks.0, model.blocks.1, model.norm_f`` -> ``blocks.0, blocks.1, norm_f``. A number keeps the
    name of its container (``transformer.h.0, transformer.h.1`` -> ``h.0, h.1``, not ``0, 1``), and a single
    layer keeps its full name.
    """
    parts = [name.split(".") for name in names]
    common = 0
    while (len(names) > 1 and all(len(p) > common + 1 for p in parts) and len({p[common] for p in parts}) == 1
           and not any(p[common + 1].isdigit() for p in parts)):
        common += 1
    return {name: ".".join(p[common:]) for name, p in zip(names, parts, strict=True)}


def output_tensor(output: object) -> Tensor | None:
    """The hidden-state tensor of a module output: the tensor itself, or the first item of a tuple/list
    (the convention of Hugging Face blocks), else ``None``."""
    if isinstance(output, Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], Tensor):
        return output[0]
    return None
