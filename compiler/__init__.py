"""tilewright.compiler: torch model -> IR Graph -> passes -> Program (see docs/design.md).

One entry point for every model kind: :func:`compile` (``flow`` ``"auto"`` | ``"mlp"`` |
``"llm"``, see :mod:`~.entry`); :func:`compile_model` is its int8 MLP-flow call.

Importing this package does not import torch (the RTL bench imports ``compiler.program`` and
``compiler.layout`` inside the simulator process): the entry points live in :mod:`~.entry`, which
imports torch through the frontend, and are loaded from there on first access (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["compile", "compile_traced", "compile_model", "Compiled"]


def __getattr__(name: str) -> Any:
    """``compile``, ``compile_traced``, ``compile_model``, ``Compiled`` from :mod:`~.entry`
    (lazy: it imports torch; the RTL bench imports this package inside the simulator)."""
    if name in __all__:
        return getattr(importlib.import_module("tilewright.compiler.entry"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
