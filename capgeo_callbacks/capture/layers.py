"""Resolving watched layers by module name or glob, finding a transformer's blocks, and reading their outputs."""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable, Sequence

from torch import Tensor, nn

DEFAULT_LAYERS = ("**.blocks.*", "**.norm_f")  # capgeo's transformer: the residual stream of each block, final norm

# The layouts find_blocks knows: the attribute holding a transformer's stack of blocks, and the names its final norm
# goes by beside that stack.
BLOCK_STACKS = ("layers", "h", "layer", "blocks")
FINAL_NORMS = ("norm", "ln_f", "final_layer_norm", "norm_f")
KNOWN_LAYOUTS = (
    "Hugging Face Llama-style 'model.layers' + 'model.norm'",
    "GPT-2 'transformer.h' + 'transformer.ln_f'",
    "GPT-NeoX 'gpt_neox.layers' + 'gpt_neox.final_layer_norm'",
    "BERT 'encoder.layer'",
    "torch.nn.TransformerEncoder 'layers' + 'norm'",
    "timm ViT 'blocks' + 'norm'",
    "capgeo's 'blocks' + 'norm_f'",
)


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


class BlocksNotFound(ValueError):
    """No single stack of transformer blocks was found in a model (:func:`find_blocks`)."""


def _stack(module: nn.Module | None) -> list[str]:
    """The child names of a stack of blocks: an ``nn.ModuleList`` or ``nn.Sequential`` of modules of one class
    (an MLP's ``Sequential(Linear, ReLU, Linear)`` is not one); empty for anything else."""
    if not isinstance(module, (nn.ModuleList, nn.Sequential)):
        return []
    children = {name: child for name, child in module.named_children()}
    if not children or len({type(child) for child in children.values()}) != 1:
        return []
    return list(children)


def _norm(module: nn.Module | None) -> bool:
    return isinstance(module, nn.Module) and not isinstance(module, nn.Identity)  # timm's norm under avg pooling


def find_blocks(model: nn.Module) -> list[str]:
    """The module names of a transformer's blocks, in order, and of its final norm where it has one.

    Looks for a stack of blocks (:data:`BLOCK_STACKS`: ``layers``, ``h``, ``layer`` or ``blocks``, an
    ``nn.ModuleList`` or ``nn.Sequential`` of modules of one class) with a final norm beside it
    (:data:`FINAL_NORMS`: ``norm``, ``ln_f``, ``final_layer_norm`` or ``norm_f``), at any depth, so a model held by a
    ``LightningModule`` attribute is found too (``self.model = LlamaForCausalLM(...)``: ``model.model.layers.0``,
    ..., ``model.model.norm``). The layouts this covers: :data:`KNOWN_LAYOUTS`. The shallowest stack is taken.

    Raises:
        BlocksNotFound: when there is no such stack, or several at the same depth (an encoder and a decoder, two
            towers); the message names what was looked for, what was found and how to pass ``layers=``.

    Example::

        find_blocks(GPT2LMHeadModel(config))  # ['transformer.h.0', ..., 'transformer.h.11', 'transformer.ln_f']
    """
    stacks: list[tuple[int, str, list[str]]] = []  # (depth, the stack's name, its blocks and final norm)
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        named = dict(module.named_children())
        for attribute in BLOCK_STACKS:
            children = _stack(named.get(attribute))
            if not children:
                continue
            norm = next((f"{prefix}{n}" for n in FINAL_NORMS if _norm(named.get(n))), None)
            blocks = [f"{prefix}{attribute}.{child}" for child in children]
            stacks.append((prefix.count(".") + 1, f"{prefix}{attribute}", blocks + ([norm] if norm else [])))
    if not stacks:
        top = ", ".join(name for name, _ in model.named_children()) or "none"
        raise BlocksNotFound(
            f"found no transformer blocks in {type(model).__name__}: looked for a stack (nn.ModuleList or "
            f"nn.Sequential of one block class) named {', '.join(BLOCK_STACKS)}, with a final norm beside it named "
            f"{', '.join(FINAL_NORMS)} (the layouts of {'; '.join(KNOWN_LAYOUTS)}); its top-level modules: {top}. "
            "Pass layers=[...]: module names or globs over model.named_modules(), e.g. "
            "layers=['encoder.layers.*', 'encoder.norm']")
    shallowest = min(depth for depth, _, _ in stacks)
    found = [(stack, names) for depth, stack, names in stacks if depth == shallowest]
    if len(found) > 1:
        listed = ", ".join(f"{describe_blocks(names)}" for _, names in found)
        raise BlocksNotFound(f"found several stacks of blocks in {type(model).__name__} at the same depth: {listed}; "
                             f"say which to watch, e.g. layers=['{found[0][0]}.*']")
    return found[0][1]


def describe_blocks(names: Sequence[str]) -> str:
    """What :func:`find_blocks` found, in words: ``model.layers.0 to model.layers.3 (4 blocks) and model.norm``."""
    blocks, norm = (names[:-1], names[-1]) if len(names) > 1 and not names[-1].rsplit(".", 1)[-1].isdigit() \
        else (names, None)
    text = f"{blocks[0]} to {blocks[-1]} ({len(blocks)} blocks)" if len(blocks) > 1 else f"{blocks[0]} (1 block)"
    return text + (f" and the final norm {norm}" if norm else " (no final norm)")


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
