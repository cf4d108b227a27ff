"""Transistor counts of the format-specific arithmetic units the RTL builds, against the int8
PE's parts: the calibration of the per-format rows of ``configs/tech/*.yaml`` (``area_um2.pe``,
``area_um2.column``; issue 20 item 3).

    nice -n 19 python benchmarks/format_units_vs_yosys.py

Each unit is synthesized alone (combinational, from :mod:`tilewright.rtl.fp_arith` and
:mod:`tilewright.rtl.mx_core`) with the generic CMOS flow of ``tilewright rtl --synth generic``
(Yosys ``stat -tech cmos``), next to a lone signed 8x8 multiplier and a 32-bit adder written in
Verilog (those of ``benchmarks/energy_area_vs_yosys.py``). The table prints transistors and the
ratio to the 8x8 multiplier and to the 32-bit adder.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from amaranth.back import verilog

from tilewright.app.eda.synth import synthesize
from tilewright.rtl.fp_arith import Fp8Mul, Fp32Add, Fp32Mul
from tilewright.rtl.mx_core import Pow2Scale

_PARTS_V = {
    "mult8": "module mult8(input signed [7:0] a, input signed [7:0] b, output signed [15:0] p);\n"
             "  assign p = a * b;\nendmodule\n",
    "add32": "module add32(input [31:0] a, input [31:0] b, output [31:0] s);\n"
             "  assign s = a + b;\nendmodule\n",
}
#: name -> the Amaranth unit
_UNITS = {
    "fp8-e4m3 mult (Fp8Mul)": lambda: Fp8Mul(fmt="fp8-e4m3"),
    "fp8-e5m2 mult (Fp8Mul)": lambda: Fp8Mul(fmt="fp8-e5m2"),
    "fp32 add (Fp32Add)": Fp32Add,
    "fp32 mult (Fp32Mul)": Fp32Mul,
    "MXINT8 scale (Pow2Scale int)": lambda: Pow2Scale(integer=True),
    "MXFP8 scale (Pow2Scale fp)": lambda: Pow2Scale(integer=False),
}


def transistors(text: str, top: str) -> int:
    """Yosys' CMOS transistor estimate of module ``top`` in Verilog ``text``."""
    with tempfile.TemporaryDirectory(prefix="fmt-units-") as d:
        f = Path(d) / f"{top}.v"
        f.write_text(text)
        return synthesize(f, top, "generic")["transistors"]


def main() -> dict[str, int]:
    out = {name: transistors(text, name) for name, text in _PARTS_V.items()}
    for name, make in _UNITS.items():
        unit = make()
        out[name] = transistors(verilog.convert(unit, name="unit"), "unit")
    print("| unit | transistors | / mult8 | / add32 |")
    print("|---|---|---|---|")
    for name, t in out.items():
        print(f"| {name} | {t:,} | {t / out['mult8']:.2f} | {t / out['add32']:.2f} |",
              flush=True)
    return out


if __name__ == "__main__":
    main()
