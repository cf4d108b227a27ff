"""tilewright's cycle convention (what its RTL does) beside SCALE-Sim 3.0.0's convention.

Usage:  python benchmarks/cycle_model_vs_scalesim.py

For a set of GEMMs on 8x8, 16x16, 128x128 and 512x512 arrays and the three dataflows (WS, OS, IS),
prints cycles and utilization under both conventions and their ratio. The differences are by construction (see tilewright.compiler.core_timing):

* WS: tilewright's RTL double-buffers the weights, so a fold's weight load hides under the previous
  fold's activation stream: R + (F-1)·max(M, 2R+C-2) + M + R + C + 1 cycles. SCALE-Sim does not
  overlap folds: F·(M + 2R + C - 2) - 1. For M >= 2R + C - 2 tilewright approaches M cycles per
  fold; SCALE-Sim pays the fill and drain every fold.
* OS: tilewright's RTL double-buffers the outputs: a tile drains while the next accumulates,
  K + (F-1)·max(K, 2R+C) + 2R + C cycles; SCALE-Sim pays F·(K + R + C - 2) - 1 (it does not
  charge the drain, and does not overlap folds).
* IS: no RTL; tilewright's convention is the WS core on the transposed problem (M and N exchanged):
  R + (F-1)·max(N, 2R+C-2) + N + R + C + 1 with F = ceil(K/R)·ceil(M/C); SCALE-Sim pays
  F·(N + 2R + C - 2) - 1 (tests/test_scalesim_dataflows.py checks that against SCALE-Sim itself).
Exact agreement of tilewright's convention with the RTL is asserted by the test suite
(tests/test_gemm_core_rtl.py); this script only tabulates the difference.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from tilewright.arch import default_arch
from tilewright.dataflow_sim.cycle import gemm_cycles

GEMMS = [(64, 64, 64), (128, 256, 128), (1, 4096, 4096), (512, 512, 512), (197, 768, 3072)]


def main() -> None:
    console = Console(width=160)
    table = Table(title="cycles: tilewright (RTL) vs SCALE-Sim convention")
    for c in ("array", "dataflow", "M x K x N", "folds", "tilewright", "scalesim",
              "tw / ss", "util tw", "util ss"):
        table.add_column(c, justify="right")
    for rows in (8, 16, 128, 512):
        for df in ("ws", "os", "is"):
            arch = default_arch().with_engine(rows=rows, cols=rows, dataflow=df)
            for m, k, n in GEMMS:
                tw = gemm_cycles(arch, m, k, n, "tilewright")
                ss = gemm_cycles(arch, m, k, n, "scalesim")
                table.add_row(f"{rows}x{rows}", df, f"{m}x{k}x{n}", str(tw.folds), f"{tw.cycles:,}",
                              f"{ss.cycles:,}", f"{tw.cycles / ss.cycles:.3f}",
                              f"{tw.utilization:.3f}", f"{ss.utilization:.3f}")
    console.print(table)


if __name__ == "__main__":
    main()
