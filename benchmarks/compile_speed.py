"""Compile speed of the LLM path (prints a table, never asserts).

Rows: wall time to compile (torch.export -> passes -> mapper -> Program -> functional run ->
Report) each tiny config in fp32 and int8 (goal < 5 s each); the analytical (shape-only) estimate
of one llama3-8b layer at seq 2048 (goal < 2 s) and of all 80 layers of llama3-70b at seq 2048
(goal < 30 s; one layer compiled, identical layers multiplied); and the mapper's design points
(op x mapping) evaluated per second over the GEMMs of those compiles.

SSM rows (issue 14 item 5): one mamba-2.8b layer, shape only, prefill at seq 2048, 4096 and 8192
(goal <= 10 s at 8192) and decode, with llama3-8b prefill at the same lengths for reference. The
selective scan is captured as one op (``tilewright::ssm_scan``). ``--before SEQ ...`` also times
the old way in the same run: the scan as the explicit time loop (``MambaBlock.unrolled_scan``),
which ``torch.export`` unrolls, folded back by the ``lower_scan`` pass with the IR's old linear
``producer``/``consumers`` searches — it takes minutes at seq 2048 (quadratic in seq).

    /work/venv/bin/python benchmarks/compile_speed.py [--ssm-only] [--before 512 1024]
"""

from __future__ import annotations

import argparse
import time
from contextlib import contextmanager

from tilewright.arch import ArchSpec, load_arch
from tilewright.dataflow_sim.compile_flow import compile_llm
from tilewright.compiler.gemm_mapper import GemmOp, map_gemm
from tilewright.compiler.ir import Graph
from tilewright.compiler.program import BgemmTask
from tilewright.dataflow_sim.compile_flow import compile_module
from tilewright.models.llm_configs import build_llm


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def timed_cpu(fn):
    """``(result, wall seconds, CPU seconds of this process)`` — on a shared machine the CPU
    figure is the one that does not depend on the other jobs."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


@contextmanager
def _linear_ir_lookups():
    """``Graph.producer``/``consumers`` as they were before the index: a search over all ops."""
    saved = Graph.producer, Graph.consumers
    Graph.producer = lambda g, t: next((op for op in g.ops if t in op.outputs), None)
    Graph.consumers = lambda g, t: [op for op in g.ops if t in op.inputs]
    try:
        yield
    finally:
        Graph.producer, Graph.consumers = saved


def _mamba_unrolled(arch: ArchSpec, seq: int, *, linear: bool):
    """One mamba-2.8b layer with the scan as the explicit loop (``torch.export`` unrolls it,
    ``lower_scan`` folds it back); ``linear``: with the IR's old linear lookups (the old way)."""
    layer, example = build_llm("mamba-2.8b", seq=seq)
    layer.mixer.unrolled_scan = True
    if not linear:
        return compile_module(layer, example, arch, name="mamba-2.8b")
    with _linear_ir_lookups():
        return compile_module(layer, example, arch, name="mamba-2.8b")


def ssm_rows(ws16: ArchSpec, before: list[int]) -> None:
    """The SSM compile-speed table (prints; never asserts)."""
    rows = []

    def row(what, fn, goal=None):
        r, wall, cpu = timed_cpu(fn)
        rows.append((what, wall, cpu, goal, r.totals()["total_cycles"]))
        return r

    for seq in (2048, 4096, 8192):
        row(f"mamba-2.8b 1 layer, prefill seq {seq} (shape only)",
            lambda: compile_llm("mamba-2.8b", ws16, seq=seq), 10.0 if seq == 8192 else None)
    for seq in (2048, 8192):
        row(f"mamba-2.8b 1 layer, decode (state of seq {seq})",
            lambda: compile_llm("mamba-2.8b", ws16, seq=seq, phase="decode"))
    for seq in (2048, 4096, 8192):
        row(f"llama3-8b 1 layer, prefill seq {seq} (shape only, reference)",
            lambda: compile_llm("llama3-8b", ws16, seq=seq))
    for seq in before:
        old = row(f"BEFORE mamba-2.8b prefill seq {seq} (unrolled, linear lookups)",
                  lambda: _mamba_unrolled(ws16, seq, linear=True))
        mid = row("  unrolled capture, indexed lookups",
                  lambda: _mamba_unrolled(ws16, seq, linear=False))
        new = row("  one-op capture (now)", lambda: compile_llm("mamba-2.8b", ws16, seq=seq))
        same = len({r.totals()["total_cycles"] for r in (old, mid, new)}) == 1
        print(f"seq {seq}: the three captures give {'the same' if same else 'DIFFERENT'} cycles")
    print(f"{'what (ws16x16, fp32)':62s} {'wall s':>7s} {'CPU s':>7s} {'goal':>5s} {'cycles':>15s}")
    for what, wall, cpu, goal, cycles in rows:
        missed = "  MISSED" if goal is not None and wall > goal else ""
        print(f"{what:62s} {wall:7.2f} {cpu:7.2f} {'' if goal is None else f'{goal:5.1f}':>5s} "
              f"{cycles:15,}{missed}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ssm-only", action="store_true", help="only the SSM table")
    ap.add_argument("--before", type=int, nargs="*", default=[], metavar="SEQ",
                    help="also time the old unrolled capture at these sequence lengths")
    args = ap.parse_args()
    ws16 = load_arch("ws16x16")
    compile_llm("tiny-llama", ws16, seq=4, execute=False)          # warm torch.export up
    ssm_rows(ws16, args.before)
    if args.ssm_only:
        return
    ws32 = ArchSpec.from_dict({"name": "ws32x32", "tensor_engine": {"rows": 32, "cols": 32,
                                                                     "dataflow": "ws"}})
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
