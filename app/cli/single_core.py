"""The single-core commands' guards: an ArchSpec with a ``mesh`` section is refused by ``compile``,
``cycles``, ``rtl``, ``sim`` and ``demo``, which cost or generate one core and would ignore the
mesh (``tilewright mesh`` and ``mesh-layer`` model it); ``cycles --dataflow`` re-targets a
systolic design's dataflow (:func:`with_dataflow`)."""

from __future__ import annotations

from pathlib import Path

from tilewright.arch import SYSTOLIC_DATAFLOWS, ArchSpec, ArchSpecError

__all__ = ["refuse_mesh", "with_dataflow"]


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


def with_dataflow(spec: ArchSpec, dataflow: str | None, source: str | Path | None = None
                  ) -> ArchSpec:
    """``spec`` with ``tensor_engine.dataflow`` set to ``dataflow`` (None: unchanged): the same
    systolic array(s) run with that dataflow. Raises :class:`ArchSpecError` for a dataflow other
    than ws/os/is, or for a tile-MAC engine (no dataflow to choose)."""
    if dataflow is None:
        return spec
    te = spec.tensor_engine
    if dataflow not in SYSTOLIC_DATAFLOWS:
        raise ArchSpecError(f"--dataflow {dataflow!r}: accepted: "
                            f"{', '.join(SYSTOLIC_DATAFLOWS)}")
    if not te.systolic:
        raise ArchSpecError(f"{source or spec.name}: --dataflow {dataflow!r} with "
                            f"tensor_engine.kind = {te.kind!r}: a dataflow applies to kind "
                            f"'systolic' only; accepted: no --dataflow")
    return spec.with_engine(dataflow=dataflow)
