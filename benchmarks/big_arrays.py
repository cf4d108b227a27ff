"""Cost of the analytical levels on big arrays and several engines (issue 14 item 7).

Usage:  python benchmarks/big_arrays.py

For R x R systolic arrays (R = 16 .. 512), each dataflow and 1 or 8 engines, on a 512x4096x4096
bf16 GEMM with the tpu-v4-like preset's memories, prints the mapper's choice and cycles, the tiled
cycle model's cycles, the closed form's cycles and utilization, and the wall time of the mapper
and of the tiled model (best of 3). The closed forms and the mapper are numpy-vectorized over
shapes and tiles: nothing loops over PEs, so the cost does not grow with the array.
Benchmarks print; they never assert.
"""

from __future__ import annotations

import time

from tilewright.arch import load_arch
from tilewright.compiler.gemm_mapper import GemmOp, map_gemm
from tilewright.dataflow_sim.cycle import gemm_cycles
from tilewright.dataflow_sim.tiled import simulate_tiled


def _best(fn, reps: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    base = load_arch("tpu-v4-like")
    op = GemmOp("g", 512, 4096, 4096, elem_bytes=2)
    head = (f"{'array':>9} {'df':>3} {'E':>2} {'closed form':>12} {'util':>6} {'mapper cyc':>11} "
            f"{'tiled cyc':>11} {'mapper s':>9} {'tiled s':>8}  mapping")
    print(head)
    print("-" * len(head))
    for r in (16, 64, 128, 256, 512):
        for df in ("ws", "os", "is"):
            for count in (1, 8):
                arch = base.with_engine(rows=r, cols=r, dataflow=df, count=count)
                g = gemm_cycles(arch, op.m, op.k, op.n)
                tm, res = _best(lambda: map_gemm(op, arch))
                tt, tiled = _best(lambda: simulate_tiled(op, arch, res.mapping))
                mp = res.mapping
                print(f"{r:>4}x{r:<4} {df:>3} {count:>2} {g.cycles:>12,} {g.utilization:>6.3f} "
                      f"{res.cost.cycles:>11,.0f} {tiled.cycles:>11,.0f} {tm:>9.3f} {tt:>8.3f}  "
                      f"{mp.m_t}x{mp.k_t}x{mp.n_t} {mp.order}")


if __name__ == "__main__":
    main()
