"""The error classes every layer shares: what the user must fix, and what they must install.

:class:`UserError` is the one base of every error the user fixes by changing an input (an ArchSpec
field, a model name, a shape that does not fit, a sweep file); the command line prints such an
error as one line ``error: ...`` and exits with status 2, never a traceback (docs/design.md, "the
error path"). Each layer defines its own subclasses next to the code that raises them and also
derives them from the built-in class callers used to catch (``ValueError`` for a bad value).
"""

from __future__ import annotations

__all__ = ["UserError", "ToolMissing"]


class UserError(Exception):
    """An input the user must change; its message names the file, field, op or module and what
    is accepted."""


class ToolMissing(UserError, RuntimeError):
    """A required external tool (Verilator, cocotb, a C++ compiler, Yosys, nextpnr) is not
    available; the message says how to install it."""
