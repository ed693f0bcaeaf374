"""The failure rule's reporting: a warning at the user's line whatever runs the user's code, never an error out of a
hook (capgeo_callbacks/run/failures.py)."""

from __future__ import annotations

import importlib.machinery
import linecache
import logging
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capgeo_callbacks.run.failures import never_fails, warn_at_caller

ROOT = Path(__file__).resolve().parents[2]
REPRODUCTION = "from capgeo_callbacks.run.failures import warn_at_caller; warn_at_caller('x')"


@pytest.mark.slow
def test_a_warning_from_python_c_is_shown_at_its_line_and_nothing_else() -> None:
    """``__main__``'s loader there is the built-in importer, whose ``get_source`` raises: the warning is shown (from
    standard input too: tests/callbacks/test_demo_transformer.py)."""
    result = subprocess.run([sys.executable, "-c", REPRODUCTION], capture_output=True, text=True, cwd=ROOT,
                            timeout=300)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "<string>:1: UserWarning: x\n")


class RaisingLoader:
    """A module loader that cannot give its source (a broken importer, a zip that went away)."""

    def get_source(self, name: str) -> str:
        raise RuntimeError("no source here")


class FrameworkWarning(UserWarning):
    pass


# How a user's code may run: name -> (the globals its frame sees, its file name, whether the line cache holds its
# source: a file on disk or a notebook's cell does; `python -c`, standard input and a vanished module do not).
CALLERS: dict[str, tuple[Callable[[], dict[str, Any]], str, bool]] = {
    "file": (lambda: {"__name__": "users_module"}, str(Path(__file__).with_name("users_module.py")), True),
    "python -c": (lambda: {"__name__": "__main__", "__loader__": importlib.machinery.BuiltinImporter}, "<string>",
                  False),
    "stdin": (lambda: {"__name__": "__main__", "__loader__": importlib.machinery.BuiltinImporter}, "<stdin>", False),
    "notebook": (lambda: {"__name__": "__main__", "__loader__": None}, "/tmp/ipykernel_1/2093245.py", True),
    "exec, fresh globals": (dict, "<exec>", True),
    "embedded, no __name__ nor __loader__": (lambda: {"__builtins__": __builtins__}, "embedded.py", True),
    "a loader that raises": (lambda: {"__name__": "zipped", "__loader__": RaisingLoader()}, "/gone/zipped.py", False),
}


def run_as(kind: str, blank_lines: int, message: str, category: type[Warning], thread: bool) -> BaseException | None:
    """Call ``warn_at_caller(message, category)`` through a framework's frame (a module named like Lightning's) from
    a user's function run as ``kind``, on its line ``blank_lines + 2``, in this thread or another; what it raised."""
    make_globals, filename, cached = CALLERS[kind]
    framework = {"__name__": "lightning.pytorch.trainer", "warn_at_caller": warn_at_caller}
    exec(compile("def hook(message, category):\n    warn_at_caller(message, category)\n", "trainer.py", "exec"),
         framework)
    source = "def fit(message, category):\n" + "\n" * blank_lines + "    hook(message, category)\n"
    if cached:  # as the import system or IPython fills it
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    users = make_globals()
    users["hook"] = framework["hook"]
    exec(compile(source, filename, "exec"), users)
    raised: list[BaseException | None] = [None]

    def call() -> None:
        try:
            users["fit"](message, category)
        except BaseException as error:  # noqa: BLE001 - the property: what it raised
            raised[0] = error

    if thread:
        worker = threading.Thread(target=call)
        worker.start()
        worker.join()
    else:
        call()
    return raised[0]


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(sorted(CALLERS)), blank_lines=st.integers(0, 30),
       message=st.text(st.characters(min_codepoint=32, max_codepoint=0x2FFF, exclude_categories=("Cs",)),
                       min_size=1, max_size=40),
       category=st.sampled_from([UserWarning, RuntimeWarning, FrameworkWarning]), thread=st.booleans(),
       as_error=st.booleans())
def test_warn_at_caller_shows_the_warning_at_the_users_line_whatever_runs_it(
        kind: str, blank_lines: int, message: str, category: type[Warning], thread: bool, as_error: bool) -> None:
    _, filename, cached = CALLERS[kind]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("error" if as_error else "always")
            raised = run_as(kind, blank_lines, message, category, thread)
        if as_error:  # the user made warnings errors: theirs to see, as the warning itself
            assert type(raised) is category and str(raised) == message and caught == []
            return
        assert raised is None and len(caught) == 1
        shown, line = caught[0], blank_lines + 2
        assert (shown.category, str(shown.message), shown.filename, shown.lineno) == (category, message, filename,
                                                                                      line)
        printed = warnings.formatwarning(shown.message, shown.category, shown.filename, shown.lineno)
        header = f"{filename}:{line}: {category.__name__}: {message}\n"
        assert printed == (header + "  hook(message, category)\n" if cached else header)  # its line, where known
    finally:
        linecache.cache.pop(filename, None)


def test_a_thread_of_the_frameworks_own_gets_a_plain_warning() -> None:
    framework = {"__name__": "torch.utils.data.worker", "warn_at_caller": warn_at_caller}
    exec(compile("def work():\n    warn_at_caller('from a worker')\n", "worker.py", "exec"), framework)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        worker = threading.Thread(target=framework["work"])
        worker.start()
        worker.join()
    assert [str(w.message) for w in caught] == ["from a worker"]


class Hooked:
    @never_fails
    def on_step(self, value: int) -> int:
        if value < 0:
            raise ValueError("negative")
        return value


class Slotted:  # no __dict__ to keep the warn-once in
    __slots__ = ()
    on_step = Hooked.on_step


def broken_showwarning(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("the user's warning display broke")


@pytest.mark.parametrize("how", ["showwarning raises", "warnings are errors", "no __dict__"])
def test_never_fails_returns_and_logs_when_its_report_cannot_be_shown(
        how: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    owner: Any = Slotted() if how == "no __dict__" else Hooked()
    with warnings.catch_warnings(record=True), caplog.at_level(logging.WARNING, logger="capgeo"), \
            monkeypatch.context() as patched:
        warnings.simplefilter("error" if how == "warnings are errors" else "always")
        if how == "showwarning raises":  # inside catch_warnings, which resets it
            patched.setattr(warnings, "showwarning", broken_showwarning)
        assert owner.on_step(3) == 3
        assert owner.on_step(-1) is None and owner.on_step(-2) is None
    said = [record.getMessage() for record in caplog.records if record.name == "capgeo"]
    assert said[:1] == [f"{type(owner).__name__}.on_step failed (ValueError: negative); skipped, training goes on "
                        "(reported once)"]
    assert len(said) == (2 if how == "no __dict__" else 1)  # once per failure where the warn-once can be kept


def test_warn_at_caller_goes_to_the_log_when_no_warning_can_be_shown(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, logger="capgeo"), \
            monkeypatch.context() as patched:
        warnings.simplefilter("always")
        patched.setattr(warnings, "showwarning", broken_showwarning)
        warn_at_caller("still said")
    assert [record.getMessage() for record in caplog.records if record.name == "capgeo"] == ["still said"]


def test_warn_at_caller_raises_the_warning_where_warnings_are_errors() -> None:
    with warnings.catch_warnings(), pytest.raises(RuntimeWarning, match="asked for"):
        warnings.simplefilter("error")
        warn_at_caller("asked for", RuntimeWarning)
