"""Dotted paths: the classes and factories offline analysis is told about by name.

Resolved at run time with importlib, so that capgeo_callbacks never imports ``tasks`` or ``models`` (they
belong to the project that uses the callbacks, not to the library).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["resolve_dotted"]


def resolve_dotted(path: str) -> Any:
    """The object named by a dotted path (``models.CapabilityModule``, or ``models:CapabilityModule``).

    Without a colon, the longest importable module prefix is imported and the rest are attributes.

    Raises:
        ValueError: if the path does not name an importable object (the message says which part failed).
    """
    if ":" in path:
        module_name, attrs = path.split(":", 1)
        candidates = [(module_name, attrs.split("."))]
    else:
        parts = path.split(".")
        candidates = [(".".join(parts[:i]), parts[i:]) for i in range(len(parts) - 1, 0, -1)]
    if not candidates or not all(candidates[0]):
        raise ValueError(f"{path!r} is not a dotted path like package.module.Name")
    for module_name, attrs in candidates:
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            # only a missing module on the path itself means "try a shorter module"; a missing
            # dependency inside it is a real error
            if err.name is None or not (module_name == err.name or module_name.startswith(err.name + ".")):
                raise
            continue
        for attr in attrs:
            if not hasattr(obj, attr):
                public = sorted(n for n in dir(obj) if not n.startswith("_"))[:12]
                raise ValueError(f"cannot resolve {path!r}: {obj.__name__!r} has no attribute {attr!r}; "
                                 f"it has: {', '.join(public)}")
            obj = getattr(obj, attr)
        return obj
    raise ValueError(f"cannot import any module of {path!r} (run from the project root, or install the package "
                     "that provides it)")
