"""Errors the compiler raises from more than one module (and the simulators re-raise).

:class:`UnsupportedOp` is raised by the frontend (an aten op without a handler) and by the MLP
lowering (an IR op it has no mapping for); it lives here so the lowering need not import the
frontend (which imports torch). :class:`MeshMappingError` is raised by the mesh code generator
(:mod:`~.mesh_codegen`) and by the mesh model (:mod:`tilewright.dataflow_sim.mesh`), which
re-exports it.
"""

from __future__ import annotations

from tilewright.errors import UserError

__all__ = ["UnsupportedOp", "MeshMappingError"]


class UnsupportedOp(UserError, ValueError):
    """The model uses an op (or an op variant) the compiler does not handle; the message names
    the op and the model source line (``file:line``)."""


class MeshMappingError(UserError, ValueError):
    """A mapping the mesh cannot run: it exceeds per-core SRAM or route ids, does not fit the
    (healthy part of the) mesh, or touches a dead core or link. The message names the limit and
    the numbers."""
