"""tilewright's ``scalesim`` cycle convention vs SCALE-Sim 3.0.0 itself, side by side.

    python benchmarks/vs_scalesim.py [--timeout 600] [--big] [--quick]

SCALE-Sim breaks on numpy 2, so it runs in its own venv (default ``/tmp/scalesim_venv``,
or ``$SCALESIM_PYTHON``) through ``benchmarks/_scalesim_runner.py``. Set it up with::

    python3 -m venv /tmp/scalesim_venv
    /tmp/scalesim_venv/bin/pip install scalesim==3.0.0 numpy==1.26.4 pandas==2.2.3

For every GEMM of the suite and each dataflow (OS, WS, IS) it prints SCALE-Sim's reported compute
cycles (COMPUTE_REPORT "Total Cycles", CALC bandwidth so no stalls), tilewright's
``gemm_cycles_array(..., convention="scalesim")``, whether they are identical, and the wall time of
each (SCALE-Sim: ``run_scale`` alone, excluding its interpreter start; tilewright: one call, best of
a timeit loop). ``--big`` adds 512x4096x4096 on 32x32 and 128x128 (SCALE-Sim needs minutes and GBs
for these; each run is bounded by ``--timeout`` seconds). Benchmarks print; they never assert.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import timeit
from pathlib import Path

from tilewright.compiler.core_timing import gemm_cycles_array

HERE = Path(__file__).resolve().parent
SUITE = [  # (rows, cols, M, K, N): SCALE-Sim needs about 1 s per 1-2 k cycles here
    (8, 8, 64, 64, 64), (8, 8, 100, 37, 53), (16, 16, 128, 256, 128), (8, 16, 96, 200, 64),
    (32, 32, 1, 1024, 512), (32, 32, 128, 256, 256), (128, 128, 64, 256, 256),
]
MEDIUM = [(16, 16, 197, 768, 768)]              # ~0.5 M cycles: ~6 min of SCALE-Sim per dataflow
BIG = [(32, 32, 512, 4096, 4096), (128, 128, 512, 4096, 4096)]   # ~10 M / ~0.6 M+ cycles


def _python() -> Path | None:
    p = Path(os.environ.get("SCALESIM_PYTHON", "/tmp/scalesim_venv/bin/python"))
    if not p.exists():
        return None
    ok = subprocess.run([str(p), "-c", "import scalesim"], capture_output=True).returncode == 0
    return p if ok else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per SCALE-Sim run")
    ap.add_argument("--medium", action="store_true", help="add 197x768x768 on 16x16")
    ap.add_argument("--big", action="store_true", help="add 512x4096x4096 on 32x32 and 128x128")
    ap.add_argument("--dataflows", default="os,ws,is")
    args = ap.parse_args()
    py = _python()
    suite = SUITE + (MEDIUM if args.medium else []) + (BIG if args.big else [])
    if py is None:
        print("SCALE-Sim venv not found: skipping the SCALE-Sim side. Set it up with\n"
              "  python3 -m venv /tmp/scalesim_venv\n"
              "  /tmp/scalesim_venv/bin/pip install scalesim==3.0.0 numpy==1.26.4 pandas==2.2.3\n"
              "(or point $SCALESIM_PYTHON at a python with scalesim installed). "
              "tilewright's numbers alone:")
    hdr = (f"{'array':>8} {'df':>3} {'M x K x N':>16} {'SCALE-Sim cyc':>14} {'tilewright':>14} "
           f"{'same':>5} {'SS wall s':>10} {'TW wall s':>10} {'ratio':>10}")
    print(hdr)
    print("-" * len(hdr))
    same_all = True
    for rows, cols, m, k, n in suite:
        for df in args.dataflows.split(","):
            ours = int(gemm_cycles_array(m, k, n, rows, cols, df, "scalesim")[0])
            t = timeit.Timer(lambda: gemm_cycles_array(m, k, n, rows, cols, df, "scalesim"))
            reps, total = t.autorange()
            tw = min(t.repeat(3, reps)) / reps
            ss_c, ss_w, note = "-", None, ""
            if py is not None:
                try:
                    out = subprocess.run(
                        [str(py), str(HERE / "_scalesim_runner.py"), str(rows), str(cols), df,
                         str(m), str(k), str(n)], capture_output=True, text=True,
                        timeout=args.timeout)
                    if out.returncode != 0:
                        note = "SCALE-Sim failed: " + (out.stderr.strip().splitlines() or ["?"])[-1]
                    else:
                        r = json.loads(out.stdout.strip().splitlines()[-1])
                        ss_c, ss_w = r["total_cycles"], r["wall_s"]
                        if r["stall_cycles"]:
                            note = f"({r['stall_cycles']} stall cycles)"
                except subprocess.TimeoutExpired:
                    note = f"SCALE-Sim did not finish in {args.timeout:.0f} s"
            same = "" if ss_c == "-" else ("yes" if ss_c == ours else "NO")
            same_all &= same != "NO"
            ratio = f"{ss_w / tw:,.0f}x" if ss_w else "-"
            print(f"{rows:>3}x{cols:<4} {df:>3} {f'{m}x{k}x{n}':>16} {ss_c!s:>14} {ours:>14,} "
                  f"{same:>5} {('%.3f' % ss_w) if ss_w else '-':>10} {tw:>10.2e} {ratio:>10} "
                  f"{note}", flush=True)
    if py is not None:
        print("all compared cycle counts identical" if same_all else
              "SOME cycle counts differ (see NO rows)")


if __name__ == "__main__":
    sys.exit(main())
