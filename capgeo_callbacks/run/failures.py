"""The failure rule: bad input raises at once, naming what was wrong; anything that fails later (a measure, a
logger, a file, a rule) is reported once and skipped, and training goes on (docs/design.md, "Failures and side
effects"). :class:`WarnOnce` is the one way capgeo reports a problem once.
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from lightning.pytorch.utilities.rank_zero import rank_zero_only

__all__ = ["WarnOnce", "check_callable", "check_positive_int", "never_fails", "warn_at_caller"]

Hook = TypeVar("Hook", bound=Callable[..., Any])
# The packages between a user's line and capgeo's hooks: a warning is attributed to the first frame outside them.
FRAMEWORKS = ("capgeo_callbacks", "lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities", "torch",
              "transformers", "accelerate", "contextlib", "functools")


@rank_zero_only
def warn_at_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """A warning on rank zero, shown at the user's line that led to it (``trainer.fit(...)``, ``trainer.train()``;
    from inside a forward hook, the line of the user's model that called the hooked layer): the first caller outside
    capgeo and the frameworks that call its hooks (:data:`FRAMEWORKS`), not capgeo's own code, which a user can do
    nothing about."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in FRAMEWORKS:
        frame = frame.f_back
    if frame is None:  # called from nothing but frameworks (a thread of their own): at the immediate caller
        warnings.warn(message, category, stacklevel=2)
        return
    registry = frame.f_globals.setdefault("__warningregistry__", {})
    warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__"), registry=registry, module_globals=frame.f_globals)


class WarnOnce:
    """``warn(key, message)``: emits ``message`` the first time ``key`` is seen, and keeps every message emitted.

    Args:
        owner: prefixed to each message (``"RankMeMonitor: ..."``); empty for none.
        emit: how a message is shown (default: a ``UserWarning`` on rank zero at the user's line,
            :func:`warn_at_caller`).
    """

    def __init__(self, owner: str = "", emit: Callable[[str], Any] | None = None) -> None:
        self.owner = owner
        self.emit = emit if emit is not None else warn_at_caller
        self.messages: list[str] = []
        self._seen: set[str] = set()

    def __call__(self, key: str, message: str) -> bool:
        """Report ``message`` unless ``key`` was reported before; whether it was reported now."""
        if key in self._seen:
            return False
        self._seen.add(key)
        text = f"{self.owner}: {message}" if self.owner else message
        self.messages.append(text)
        self.emit(text)
        return True


def never_fails(hook: Hook) -> Hook:
    """Run a hook; if it raises, warn once per hook and error type and return ``None``.

    Applied to every hook that runs during training, never to ``__init__`` or ``setup`` (configuration errors
    must stop the run before it starts). Under DDP a hook that fails on one rank between collectives may leave
    the other ranks waiting: the collectives come first in each hook.
    """

    @functools.wraps(hook)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return hook(self, *args, **kwargs)
        except Exception as error:  # noqa: BLE001 - the rule: report and skip, never stop training
            failures = self.__dict__.setdefault("_failures", WarnOnce())
            failures(f"{hook.__name__}:{type(error).__name__}",
                     f"{type(self).__name__}.{hook.__name__} failed ({type(error).__name__}: {str(error)[:300]}); "
                     "skipped, training goes on (reported once)")
            return None

    return guarded  # type: ignore[return-value]


def check_positive_int(name: str, value: Any, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_callable(name: str, value: Any, signature: str) -> None:
    if value is not None and not callable(value):
        raise ValueError(f"{name} must be callable {signature}, got {value!r}")
