"""Helpers the callbacks, the Hugging Face callback and offline analysis share (no callback class here): the
failure rule, appending a measured point, argument checks, the default watched layers."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from lightning.pytorch.utilities import rank_zero_warn

__all__ = ["DEFAULT_LAYERS", "append_point", "check_callable", "check_positive_int", "never_fails"]

Hook = TypeVar("Hook", bound=Callable[..., Any])
DEFAULT_LAYERS = ("**.blocks.*", "**.norm_f")  # capgeo's transformer: the residual stream of each block, final norm


def never_fails(hook: Hook) -> Hook:
    """Run a callback hook; if it raises, warn once per hook and error type and return ``None``.

    Applied to every hook that runs during training, never to ``__init__`` or ``setup`` (configuration
    errors must stop the run before it starts). Under DDP a hook that fails on one rank between
    collectives may leave the other ranks waiting: the collectives come first in each hook.
    """

    @functools.wraps(hook)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return hook(self, *args, **kwargs)
        except Exception as error:  # noqa: BLE001 - the rule: report and skip, never stop training
            key = (hook.__name__, type(error).__name__)
            failures = self.__dict__.setdefault("_failures", set())
            if key not in failures:
                failures.add(key)
                rank_zero_warn(f"{type(self).__name__}.{hook.__name__} failed ({type(error).__name__}: "
                               f"{str(error)[:300]}); skipped, training goes on (reported once)")
            return None

    return guarded  # type: ignore[return-value]


def append_point(points: list[list[float]], step: int, value: float) -> None:
    """Append (step, value), first dropping points at or after ``step`` (a resumed run re-validating)."""
    if points and points[-1][0] >= step:
        points[:] = [p for p in points if p[0] < step]
    points.append([step, value])


def check_positive_int(name: str, value: Any, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_callable(name: str, value: Any, signature: str) -> None:
    if value is not None and not callable(value):
        raise ValueError(f"{name} must be callable {signature}, got {value!r}")
