"""Speed of each level for the GEMM core: Verilog generation, Verilator builds, RTL simulation
with both drivers (cocotb and the C++ fast driver; simulated cycles per wall second) and the cycle
model (GEMM predictions per second).

Usage:  python benchmarks/rtl_speed.py [--sizes 8x8,16x16] [--dataflow ws] [--gemm 256]

Prints one table. Ratios are against the anchor (the cocotb RTL simulation of the same GEMM on the
same machine in the same run); absolute seconds depend on machine load. Builds go to a fresh cache
folder so build times are real, not cache hits. Both drivers must report the same cycles and C.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from tilewright.arch import ArchSpec, default_arch
from tilewright.compiler.program import GemmTask, Program, TensorInfo
from tilewright.cosim import sim as cosim
from tilewright.dataflow_sim.cycle import gemm_cycles, gemm_cycles_array


def arch_for(rows: int, cols: int, dataflow: str) -> ArchSpec:
    base = default_arch().model_dump(mode="json")
    base["name"] = f"bench-{dataflow}{rows}x{cols}"
    base["tensor_engine"].update(rows=rows, cols=cols, dataflow=dataflow)
    base["memory"] = {"scratchpad_kib": 256, "accumulator_kib": 256}
    return ArchSpec.from_dict(base)


def one_gemm(arch: ArchSpec, m: int, k: int, n: int) -> tuple[Program, dict]:
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    tensors = {"a": TensorInfo(name="a", shape=(m, k), format="int8"),
               "b": TensorInfo(name="b", shape=(k, n), format="int8"),
               "c": TensorInfo(name="c", shape=(m, n), format="int32")}
    prog = Program(name="bench", arch_hash=arch.content_hash(), tensors=tensors,
                   inputs=["a", "b"], outputs=["c"],
                   tasks=[GemmTask(name="g", a="a", b="b", out="c", m=m, k=k, n=n)])
    return prog, {"a": a, "b": b}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8x8,16x16")
    ap.add_argument("--dataflow", default="ws", choices=["ws", "os"])
    ap.add_argument("--gemm", type=int, default=256, help="M = K = N of the timed GEMM")
    args = ap.parse_args()
    os.environ["TILEWRIGHT_CACHE"] = tempfile.mkdtemp(prefix="tw-bench-cache-")
    console = Console(width=160)
    table = Table(title=f"GEMM core speed, {args.dataflow.upper()}, GEMM {args.gemm}^3 int8")
    for col in ("array", "verilog gen s", "cocotb build s", "fast build s", "RTL cycles",
                "model cycles", "cocotb cycles/s", "fast cycles/s", "fast / cocotb",
                "cocotb run s", "fast run s", "model GEMMs/s", "model / fast RTL"):
        table.add_column(col, justify="right")
    s = args.gemm
    for size in args.sizes.split(","):
        rows, cols = (int(x) for x in size.lower().split("x"))
        arch = arch_for(rows, cols, args.dataflow)
        prog, inputs = one_gemm(arch, s, s, s)
        t0 = time.perf_counter()
        run = cosim.run("core", prog, arch, inputs=inputs)
        wall = time.perf_counter() - t0
        t0 = time.perf_counter()
        fast = cosim.run("core", prog, arch, inputs=inputs, driver="fast")
        fast_wall = time.perf_counter() - t0
        rec, frec = run.records[0], fast.records[0]
        same_c = np.array_equal(fast.outputs["c"], run.outputs["c"])
        if frec["cycles"] != rec["cycles"] or not same_c:
            raise SystemExit(f"{size}: the fast driver disagrees with cocotb "
                             f"({frec['cycles']} vs {rec['cycles']} cycles)")
        sim_rate = rec["cycles"] / rec["run_seconds"]
        fast_rate = frec["cycles"] / frec["run_seconds"]
        # cycle model: many shapes in one vectorized call
        shapes = np.random.default_rng(1).integers(1, 4096, (3, 100_000))
        t1 = time.perf_counter()
        gemm_cycles_array(shapes[0], shapes[1], shapes[2], rows, cols, args.dataflow)
        model_rate = shapes.shape[1] / (time.perf_counter() - t1)
        fast_gemm_rate = 1.0 / frec["run_seconds"]
        fb = fast.build
        table.add_row(size, f"{run.build.generate_seconds:.2f}", f"{run.build.build_seconds:.1f}",
                      f"{fb.build_seconds:.1f}", str(rec["cycles"]),
                      str(gemm_cycles(arch, s, s, s).cycles), f"{sim_rate:,.0f}",
                      f"{fast_rate:,.0f}", f"{fast_rate / sim_rate:,.0f}x",
                      f"{wall - run.build.generate_seconds - run.build.build_seconds:.1f}",
                      f"{fast_wall - fb.generate_seconds - fb.build_seconds:.2f}",
                      f"{model_rate:,.0f}", f"{model_rate / fast_gemm_rate:,.0f}x")
    console.print(table)
    console.print("cycles/s: cycles the core was busy / wall time of that busy period (cocotb "
                  "waits on `busy` from Python; the fast driver clocks the model from C++). "
                  "'run s' is the whole run (process start, buffer loads and reads, vector tasks); "
                  "'fast / cocotb' is the ratio of simulated cycles/s in this run.")


if __name__ == "__main__":
    main()
