"""What the RTL generators build, checked before any RTL flow starts (``tilewright rtl``,
``sim --rtl``, ``demo``, ``fpga``).

The analytical levels (cycle model, mapper, Report, energy/area, sweeps, cluster chips) accept
tensor engines up to :data:`tilewright.arch.MAX_ARRAY_DIM` per dimension, the three systolic
dataflows ``ws``/``os``/``is`` and ``tensor_engine.count`` engines per chip. The generators
(:mod:`tilewright.rtl.systolic`, :mod:`tilewright.rtl.cube`, the tops built on them) build one
engine of at most :data:`tilewright.arch.RTL_MAX_ARRAY_DIM` per dimension, systolic dataflows
``ws`` and ``os`` only, and in the number formats of :data:`RTL_FORMATS` only (int8 everywhere;
bf16, fp8 and MX on the weight-stationary systolic array; MX with exactly 32 rows).
:func:`refuse_beyond_rtl` turns the difference into one line.
"""

from __future__ import annotations

from pathlib import Path

from tilewright.arch import RTL_MAX_ARRAY_DIM, ArchSpec, ArchSpecError

__all__ = ["RTL_DATAFLOWS", "RTL_FORMATS", "MX_RTL_ROWS", "rtl_formats", "rtl_limits_exceeded",
           "refuse_beyond_rtl"]

#: systolic dataflows the RTL GEMM core implements
RTL_DATAFLOWS = ("ws", "os")

#: (input = weight format, accumulator format) the RTL engines build, by engine: int8 -> int32
#: everywhere (:mod:`tilewright.rtl.gemm_core`, the tile-MAC engines); bf16 -> fp32
#: (:mod:`tilewright.rtl.systolic_bf16`) and fp8 -> fp32 (:mod:`tilewright.rtl.systolic_fp8`) on
#: the weight-stationary systolic array only, and MX -> fp32 (:mod:`tilewright.rtl.mx_core`) on a
#: weight-stationary array of :data:`MX_RTL_ROWS` rows
RTL_FORMATS: dict[str, tuple[tuple[str, str], ...]] = {
    "systolic ws": (("int8", "int32"), ("bf16", "fp32"), ("fp8-e4m3", "fp32"),
                    ("fp8-e5m2", "fp32"), ("mxint8", "fp32"), ("mxfp8", "fp32"),
                    ("mxfp8-e5m2", "fp32")),
    "systolic os": (("int8", "int32"),),
    "tile-MAC": (("int8", "int32"),),
}


#: rows of the MX RTL core: one MX block (32 elements along K) per K tile
MX_RTL_ROWS = 32


def rtl_formats(spec: ArchSpec) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(engine name, the (element, accumulator) formats its RTL builds) for ``spec``."""
    te = spec.tensor_engine
    engine = f"systolic {te.dataflow}" if te.systolic else "tile-MAC"
    return engine, RTL_FORMATS.get(engine, ())

_ANALYTICAL = ("the analytical levels accept this design (`tilewright cycles`, `compile`, "
               "`sweep`, `cluster`)")


def rtl_limits_exceeded(spec: ArchSpec) -> list[str]:
    """The tensor-engine fields beyond what the RTL generators build, one phrase each (empty
    when the design can be generated)."""
    te = spec.tensor_engine
    out = [f"tensor_engine.{f} = {getattr(te, f)}" for f in ("rows", "cols", "depth")
           if getattr(te, f) > RTL_MAX_ARRAY_DIM]
    if out:
        out[-1] += f" (the RTL generators build up to {RTL_MAX_ARRAY_DIM} per dimension)"
    if te.systolic and te.dataflow not in RTL_DATAFLOWS:
        out.append(f"tensor_engine.dataflow = {te.dataflow!r} (the RTL core implements "
                   f"{' and '.join(repr(d) for d in RTL_DATAFLOWS)})")
    engine, formats = rtl_formats(spec)
    fmt = (te.input_format, te.accumulator_format)
    if formats and (te.weight_format != te.input_format or fmt not in formats):
        shown = te.input_format if te.weight_format == te.input_format else \
            f"{te.input_format} x {te.weight_format}"
        where = f"the {te.dataflow} systolic array" if te.systolic else f"the {te.kind} engine"
        out.append(f"tensor_engine formats {shown} -> {te.accumulator_format} on {where} (its "
                   f"RTL builds {', '.join(f'{a} -> {c}' for a, c in formats)})")
    elif te.input_format.startswith("mx") and te.rows != MX_RTL_ROWS:
        out.append(f"tensor_engine.rows = {te.rows} with {te.input_format} (the MX RTL core "
                   f"has {MX_RTL_ROWS} rows, one MX block per K tile)")
    if te.count > 1:
        out.append(f"tensor_engine.count = {te.count} (the RTL generators build one engine)")
    return out


def refuse_beyond_rtl(spec: ArchSpec, command: str, source: str | Path | None = None
                      ) -> ArchSpec:
    """``spec`` unchanged when the RTL generators can build it; else :class:`ArchSpecError`
    (one line: the fields, the RTL's limit, and that the analytical levels accept it)."""
    bad = rtl_limits_exceeded(spec)
    if bad:
        raise ArchSpecError(f"{source or spec.name}: {'; '.join(bad)}: beyond what `tilewright "
                            f"{command}` can generate; {_ANALYTICAL}")
    return spec
