"""Progress and diagnostics for long steps: one ``tilewright`` logger and a spinner on stderr.

Every layer logs to ``logging.getLogger("tilewright")`` (or a child) instead of printing
diagnostics; the command line sets its level (``-v`` INFO, ``-vv`` DEBUG, ``-q`` WARNING only).
:func:`progress` wraps a step that can take longer than a second (a compile, a cluster
simulation, a Verilator build, a place-and-route run): it shows a rich spinner on stderr when
stderr is a terminal and progress is not silenced, logs the step at INFO and its wall time in
seconds at DEBUG. Off a terminal (piped, in CI, under pytest) nothing is drawn.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import contextmanager
from typing import Iterator

__all__ = ["LOGGER", "progress", "set_quiet", "configure_logging"]

#: the project's logger; modules use ``LOGGER.getChild(__name__)`` or this one
LOGGER = logging.getLogger("tilewright")

#: set by ``-q``: no spinner, WARNING-level logging only
_STATE: dict = {"quiet": False, "status": None, "texts": []}


def set_quiet(quiet: bool) -> None:
    """Silence (``True``) or allow the progress spinner."""
    _STATE["quiet"] = quiet


class _StderrHandler(logging.StreamHandler):
    """A stream handler writing to whatever ``sys.stderr`` is when a record is emitted (a
    plain ``StreamHandler`` keeps the stream it was made with, which a test harness that swaps
    ``sys.stderr`` may have closed since)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure_logging(verbose: int = 0, quiet: bool = False) -> None:
    """Route the ``tilewright`` logger to stderr as ``level: message`` lines: WARNING and above
    by default and with ``quiet``, INFO with ``verbose`` 1, DEBUG with 2 or more."""
    set_quiet(quiet)
    level = (logging.WARNING if quiet or verbose <= 0 else
             logging.INFO if verbose == 1 else logging.DEBUG)
    LOGGER.setLevel(level)
    if not any(getattr(h, "_tilewright", False) for h in LOGGER.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        handler._tilewright = True                 # type: ignore[attr-defined]
        LOGGER.addHandler(handler)
    LOGGER.propagate = False


def _show_spinner() -> bool:
    stream = sys.stderr
    return not _STATE["quiet"] and hasattr(stream, "isatty") and stream.isatty()


@contextmanager
def progress(what: str) -> Iterator[None]:
    """Show ``what`` with a spinner on stderr while the block runs (terminal only, not with
    ``-q``); log it at INFO and its wall time (seconds) at DEBUG. A step inside another step
    shows as ``outer › inner`` on the outer step's spinner, and the outer text comes back when
    it ends."""
    LOGGER.info("%s ...", what)
    t0 = time.perf_counter()
    status = None
    outer = _STATE.get("status")
    if outer is not None:
        _STATE["texts"].append(what)
        outer.update(" › ".join(_STATE["texts"]))
    elif _show_spinner():
        from rich.console import Console  # noqa: PLC0415  (lazy: rich only when drawing)
        from rich.errors import LiveError  # noqa: PLC0415  (lazy: rich only when drawing)
        status = Console(stderr=True).status(what)
        try:
            status.start()
            _STATE["status"], _STATE["texts"] = status, [what]
        except LiveError:       # a caller's own live display is on screen: leave it the screen
            status = None
    try:
        yield
    finally:
        if status is not None:
            status.stop()
            _STATE["status"], _STATE["texts"] = None, []
        elif outer is not None:
            _STATE["texts"].pop()
            outer.update(" › ".join(_STATE["texts"]))
    LOGGER.debug("%s: %.3f s", what, time.perf_counter() - t0)
