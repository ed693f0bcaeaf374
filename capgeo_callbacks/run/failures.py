"""The failure rule: bad input raises at once, naming what was wrong; anything that fails later (a measure, a
logger, a file, a rule) is reported once and skipped, and training goes on (docs/design.md, "Failures and side
effects"). :class:`WarnOnce` is the one way capgeo reports a problem once.
"""

from __future__ import annotations

import contextlib
import functools
import linecache
import logging
import sys
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

from lightning.pytorch.utilities.rank_zero import rank_zero_only

__all__ = ["WarnOnce", "check_callable", "check_positive_int", "never_fails", "warn_at_caller"]

Hook = TypeVar("Hook", bound=Callable[..., Any])
# The packages between a user's line and capgeo's hooks: a warning is attributed to the first frame outside them.
# A thread's own machinery (threading, concurrent.futures) is skipped too: a thread started by a framework has no
# user's line, and its warning is shown plainly; so is the import machinery (a former name, imported).
FRAMEWORKS = ("capgeo_callbacks", "lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities", "torch",
              "transformers", "accelerate", "contextlib", "functools", "threading", "concurrent", "importlib")
log = logging.getLogger("capgeo")


@rank_zero_only
def warn_at_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """A warning on rank zero, shown at the user's line that led to it (``trainer.fit(...)``, ``trainer.train()``;
    from inside a forward hook, the line of the user's model that called the hooked layer): the first caller outside
    capgeo and the frameworks that call its hooks (:data:`FRAMEWORKS`), not capgeo's own code, which a user can do
    nothing about.

    Whatever runs the user's code (a file, ``python -c``, standard input, a notebook, ``exec`` in a globals dict of
    its own, an embedded interpreter, a thread), the warning is shown, at the user's line where one is found, else as
    a plain warning. It never raises, but for the warning itself where the user made warnings errors (``-W error``,
    ``warnings.filterwarnings("error")``): that is what they asked for. Should showing it fail all the same (a
    ``warnings.showwarning`` that raises), it goes to the ``capgeo`` logger.
    """
    try:
        frame = _user_frame(sys._getframe(1))
        if frame is not None:
            _show_at(frame, message, category)
            return
    except Warning:
        raise  # warnings made errors: the user's choice
    except Exception:  # noqa: BLE001, S110 - a caller that cannot be read or shown at: the plain warning below
        pass
    finally:
        frame = None  # no frame kept alive by this one's locals
    try:
        warnings.warn(message, category, stacklevel=3)  # past rank_zero_only's wrapper: the one who called
    except Warning:
        raise
    except Exception:  # noqa: BLE001 - even showing a warning failed: the log, and never an error
        _log_quietly(message)


def _user_frame(frame: FrameType | None) -> FrameType | None:
    """The first frame from ``frame`` outwards whose module is not in :data:`FRAMEWORKS` (None: none is). A module
    without a name (``exec`` in a bare globals dict, an embedded interpreter) is the user's."""
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if not isinstance(name, str) or name.split(".")[0] not in FRAMEWORKS:
            return frame
        frame = frame.f_back
    return None


def _show_at(frame: FrameType, message: str, category: type[Warning]) -> None:
    """``message`` as a warning at ``frame``'s line, in its module's registry (so the filters' "once per line" holds
    there). Its module's loader is only offered to ``linecache``, lazily: ``warnings.warn_explicit(module_globals=...)``
    asks it for the source at once, and ``__main__``'s loader under ``python -c`` or standard input raises there."""
    globals_ = frame.f_globals
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    with contextlib.suppress(Exception):  # a loader that cannot be asked: the warning without its line
        linecache.lazycache(filename, globals_)  # the line shown beside the warning, from a zip or a notebook too
    name = globals_.get("__name__")  # none (exec in a bare dict): named from the file, as warnings.warn would
    named = {"module": name} if isinstance(name, str) else {}  # module=None would drop the warning unseen
    warnings.warn_explicit(message, category, filename, lineno, registry=globals_.setdefault("__warningregistry__", {}),
                           **named)


def _log_quietly(message: str) -> None:
    with contextlib.suppress(Exception):  # a logging handler that raises: nothing left to say it with
        log.warning("%s", message)


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

    The report itself never escapes the hook either: where it cannot be shown as a warning (the user made warnings
    errors, or a ``warnings.showwarning`` of theirs raises) it goes to the ``capgeo`` logger, and training goes on.
    """

    @functools.wraps(hook)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return hook(self, *args, **kwargs)
        except Exception as error:  # noqa: BLE001 - the rule: report and skip, never stop training
            _report_failure(self, hook.__name__, error)
            return None

    return guarded  # type: ignore[return-value]


def _report_failure(owner: Any, hook: str, error: Exception) -> None:
    """Say once per hook and error type that ``owner``'s ``hook`` failed; never raises."""
    text = (f"{type(owner).__name__}.{hook} failed ({type(error).__name__}: {str(error)[:300]}); skipped, training "
            "goes on (reported once)")
    try:
        failures = owner.__dict__.setdefault("_failures", WarnOnce())
        failures(f"{hook}:{type(error).__name__}", text)
    except Exception:  # noqa: BLE001 - the report could not be shown as a warning: the log (once, WarnOnce kept it)
        _log_quietly(text)


def check_positive_int(name: str, value: Any, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_callable(name: str, value: Any, signature: str) -> None:
    if value is not None and not callable(value):
        raise ValueError(f"{name} must be callable {signature}, got {value!r}")
