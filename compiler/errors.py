"""Errors of the compiler's front end that torch-free modules raise too.

:class:`UnsupportedOp` is raised by the frontend (an aten op without a handler) and by the MLP
lowering (an IR op it has no mapping for); it lives here so the lowering need not import the
frontend (which imports torch).
"""

from __future__ import annotations

__all__ = ["UnsupportedOp"]


class UnsupportedOp(ValueError):
    """The model uses an op (or an op variant) the compiler does not handle; the message names
    the op and the model source line (``file:line``)."""
