"""Compile speed of the LLM path (prints a table, never asserts).

Rows: wall time to compile (torch.export -> passes -> mapper -> Program -> functional run ->
Report) each tiny config in fp32 and int8 (goal < 5 s each); the analytical (shape-only) estimate
of one llama3-8b layer at seq 2048 (goal < 2 s) and of all 80 layers of llama3-70b at seq 2048
(goal < 30 s; one layer compiled, identical layers multiplied); and the mapper's design points
(op x mapping) evaluated per second over the GEMMs of those compiles.

    /work/venv/bin/python benchmarks/compile_speed.py
"""

from __future__ import annotations

import time

from tilewright.arch import ArchSpec, load_arch
from tilewright.dataflow_sim.compile_flow import compile_llm
from tilewright.compiler.gemm_mapper import GemmOp, map_gemm
from tilewright.compiler.program import BgemmTask


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    ws16 = load_arch("ws16x16")
    ws32 = ArchSpec.from_dict({"name": "ws32x32", "tensor_engine": {"rows": 32, "cols": 32,
                                                                     "dataflow": "ws"}})
    compile_llm("tiny-llama", ws16, seq=4, execute=False)          # warm torch.export up
    rows = []
    for name, phase in (("tiny-llama", "prefill"), ("tiny-llama", "decode"),
                        ("tiny-moe", "prefill"), ("tiny-mamba", "prefill"),
                        ("tiny-mamba", "decode")):
        for fmt, arch in (("fp32", ws16), ("int8", ws16), ("mxfp8", ws32)):
            _, s = timed(lambda: compile_llm(name, arch, seq=8, batch=2, phase=phase, fmt=fmt))
            rows.append((f"{name} {phase} {fmt} (compile + execute)", s, 5.0))
    r8, s8 = timed(lambda: compile_llm("llama3-8b", ws16, seq=2048))
    rows.append(("llama3-8b 1 layer, seq 2048 (shape only)", s8, 2.0))
    r70, s70 = timed(lambda: compile_llm("llama3-70b", ws16, seq=2048).totals(all_layers=True))
    rows.append(("llama3-70b 80 layers, seq 2048 (shape only)", s70, 30.0))

    print(f"{'what':58s} {'seconds':>8s} {'goal':>6s}")
    for what, s, goal in rows:
        print(f"{what:58s} {s:8.2f} {goal:6.1f}{'' if s < goal else '  MISSED'}")
    print(f"llama3-8b layer: {r8.totals()['total_cycles']:,} cycles; llama3-70b all layers: "
          f"{r70['total_cycles']:,} cycles (ws16x16, fp32)")

    points, secs = 0, 0.0
    for res in (r8,):
        for t in res.program.tasks:
            if isinstance(t, BgemmTask):
                for eb in (1, 2, 4):
                    m = map_gemm(GemmOp(t.name, t.m, t.k, t.n, batch=t.batch_size,
                                        elem_bytes=eb), ws16)
                    points += m.evaluated
                    secs += m.seconds
    print(f"mapper: {points:,} design points (op x mapping) in {secs:.2f} s = "
          f"{points / secs:,.0f} points/s")


if __name__ == "__main__":
    main()
