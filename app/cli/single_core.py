"""The single-core commands' guard: an ArchSpec with a ``mesh`` section is refused by ``compile``,
``cycles``, ``rtl``, ``sim`` and ``demo``, which cost or generate one core and would ignore the
mesh (``tilewright mesh`` and ``mesh-layer`` model it)."""

from __future__ import annotations

from pathlib import Path

from tilewright.arch import ArchSpec, ArchSpecError

__all__ = ["refuse_mesh"]


def refuse_mesh(spec: ArchSpec, command: str, source: str | Path | None = None) -> ArchSpec:
    """``spec`` unchanged when it has no ``mesh`` section; else :class:`ArchSpecError` naming the
    section and the commands that model it."""
    if spec.mesh is not None:
        raise ArchSpecError(
            f"{source or spec.name}: mesh = {spec.mesh.rows}x{spec.mesh.cols} cores: `tilewright "
            f"{command}` models one core and would ignore the mesh section; accepted: an "
            f"ArchSpec without mesh, or `tilewright mesh gemv|gemm` / `tilewright mesh-layer` "
            f"(they model the mesh)")
    return spec
