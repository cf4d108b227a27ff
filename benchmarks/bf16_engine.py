"""Yosys resources of the bf16 (fp32-accumulate) WS array against the int8 WS array, as a table.

    nice python benchmarks/bf16_engine.py [--rows 4] [--cols 4] [--targets ice40,generic]

For each array (``tilewright.rtl.systolic.WeightStationaryArray``, int8 x int8 -> int32, and
``tilewright.rtl.systolic_bf16.Bf16WeightStationaryArray``, bf16 x bf16 -> fp32 with one exact
bf16 multiplier and one fp32 RNE adder per PE, both combinational) it writes the Verilog into a
temporary folder and runs each target flow of ``tilewright.app.eda.synth.synthesize`` (the same code as
``tilewright rtl --synth TARGET``). It prints one row per run: cells, LUTs, FFs, DSPs, the CMOS
transistor proxy (``generic``) and the Yosys wall time, then the bf16/int8 ratio of each count
measured in the same run (the int8 array is the anchor). The bf16 array's flows are slow (about
10 min for ice40 and 8 min for generic on a loaded 2-core machine, 60-100x the int8 array's).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from amaranth import Module
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilewright.rtl.systolic import WeightStationaryArray
from tilewright.rtl.systolic_bf16 import Bf16WeightStationaryArray
from tilewright.app.eda.synth import synthesize

_KEYS = ("cells", "luts", "ffs", "dsps", "transistors")


class _Ports(wiring.Component):
    """The array behind plain ports (its streams are always-ready, which Verilog export of the
    bare array rejects as constant ports)."""

    def __init__(self, array, elem_bits: int, acc_bits: int):
        self._array = array
        r, c = array.rows, array.cols
        super().__init__({"w": In(c * elem_bits), "w_valid": In(1), "a": In(r * elem_bits),
                          "a_valid": In(1), "commit": In(1), "c": Out(c * acc_bits),
                          "c_valid": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.array = arr = self._array
        m.d.comb += [arr.w_in.payload.eq(self.w), arr.w_in.valid.eq(self.w_valid),
                     arr.a_in.payload.a.eq(self.a), arr.a_in.payload.commit.eq(self.commit),
                     arr.a_in.valid.eq(self.a_valid), self.c.eq(arr.c_out.payload),
                     self.c_valid.eq(arr.c_out.valid)]
        return m


def _synth(component, top: str, target: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="tw_bf16_synth_") as d:
        vfile = Path(d) / f"{top}.v"
        vfile.write_text(verilog.convert(component, name=top, emit_src=False))
        return synthesize(vfile, top, target)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--cols", type=int, default=4)
    ap.add_argument("--targets", default="ice40,generic")
    args = ap.parse_args()
    r, c = args.rows, args.cols
    head = ("array", "target", "cells", "LUTs", "FFs", "DSPs", "transistors", "Yosys s")
    widths = (10, 8, 8, 7, 6, 5, 11, 8)
    row = lambda vals: " ".join(f"{v!s:>{w}}" for v, w in zip(vals, widths))  # noqa: E731
    print(f"{r}x{c} weight-stationary arrays, Yosys resources (bf16/int8 ratios below)")
    print(row(head))
    for target in args.targets.split(","):
        res = {}
        for name, comp in (("int8", _Ports(WeightStationaryArray(rows=r, cols=c), 8, 32)),
                           ("bf16", _Ports(Bf16WeightStationaryArray(rows=r, cols=c), 16, 32))):
            s = _synth(comp, f"tw_{name}_ws_array", target)
            res[name] = s
            print(row((name, target, s["cells"], s["luts"] if target != "generic" else "-",
                       s["ffs"], s["dsps"], s.get("transistors", "-"),
                       f"{s['wall_seconds']:.1f}")), flush=True)
        ratio = []
        for k in _KEYS:
            a, b = res["int8"].get(k), res["bf16"].get(k)
            ratio.append(f"{b / a:.1f}x" if isinstance(a, (int, float)) and a else "-")
        print(row(("bf16/int8", target, ratio[0],
                   ratio[1] if target != "generic" else "-", ratio[2], ratio[3], ratio[4],
                   f"{res['bf16']['wall_seconds'] / res['int8']['wall_seconds']:.1f}x")))


if __name__ == "__main__":
    main()
