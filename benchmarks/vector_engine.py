"""The accelerator top's vector engine on typical layer ops: cycles, where they go, and sim speed.

For each kernel (softmax rows, SiLU, an elementwise product, a row sum, Mamba's scan) on
``configs/ws8x8v.yaml`` (8 lanes, 32-byte memory port): the cycle model's cycles
(:mod:`tilewright.dataflow_sim.accel_timing`), the RTL's cycles on the cocotb bench and on the C++
fast driver (both checked equal to the model and the results bit-exact with the
instruction-level model), elements per cycle against the lanes' peak, the share of cycles the
vector engine is busy (the rest is DMA: with one shared vector buffer a kernel's loads, compute
and stores do not overlap; with ``vector_unit.double_buffer`` they do, see
:mod:`tilewright.compiler.vector_codegen` and ``benchmarks/vector_double_buffer.py``), and the wall time of both RTL drivers in this run.

Usage: ``python benchmarks/vector_engine.py [--arch FILE] [--no-rtl]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tilewright.arch import load_arch
from tilewright.compiler.codegen import VBUF_WORDS, beat_bytes
from tilewright.compiler.vector_codegen import VectorKernel, codegen_vector
from tilewright.dataflow_sim import scan_numerics as sn
from tilewright.dataflow_sim.accel_timing import predict_segment
from tilewright.dataflow_sim.vector_isa import kernel_reference


def _kernels(rng):
    """(kernel, raw operands, elements): typical shapes of a small layer."""
    q = lambda shape: rng.integers(-1500, 1500, shape)  # noqa: E731
    bt, length, d, n = 1, 16, 64, 8
    scan_ops = [sn.to_a_code(np.exp(-rng.uniform(0.01, 1, (bt, length, d, n)))),
                sn.to_h_code(rng.normal(0, 1, (bt, length, d, n))),
                sn.to_h_code(rng.normal(0, 1, (bt, length, n))),
                sn.to_h_code(rng.normal(0, 1, (bt, d, n)))]
    return [
        (VectorKernel("softmax", "row", "softmax", (64, 32)), [q((64, 32))], 64 * 32),
        (VectorKernel("silu", "elementwise", "silu", (4096,)), [q((4096,))], 4096),
        (VectorKernel("mul", "elementwise", "mul", (4096,)), [q((4096,)), q((4096,))], 4096),
        (VectorKernel("rowsum", "row", "sum", (64, 64)), [q((64, 64))], 64 * 64),
        (VectorKernel("scan", "scan", "scan", (bt, length, d, n)), scan_ops, bt * length * d),
    ]


def _same(a, b) -> bool:
    if isinstance(b, tuple):
        return all(np.array_equal(x, y) for x, y in zip(a, b))
    return np.array_equal(a, b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", default="ws8x8v")
    ap.add_argument("--no-rtl", action="store_true", help="cycle model only")
    args = ap.parse_args()
    arch = load_arch(args.arch)
    lanes = arch.vector_unit.lanes
    suite = _kernels(np.random.default_rng(0))
    kernels = [k for k, _, _ in suite]
    ops = {k.name: o for k, o, _ in suite}
    isa = codegen_vector(arch, kernels)
    runs = {}
    if not args.no_rtl:
        from tilewright.cosim import sim as cosim  # noqa: PLC0415
        from tilewright.cosim.program_jobs import KernelBatch  # noqa: PLC0415
        for name in ("cocotb", "fast"):
            warm = KernelBatch(kernels[:1], {kernels[0].name: ops[kernels[0].name]})
            cosim.run("accel", warm, arch, driver=name)                         # build, warm
            t0 = time.perf_counter()
            runs[name] = (cosim.run("accel", KernelBatch(kernels, ops), arch, driver=name),
                          time.perf_counter() - t0)
    print(f"{arch.name}: {lanes} lanes, vector buffer {VBUF_WORDS:,} words x {lanes} 32-bit "
          f"lanes, {beat_bytes(arch)}-byte memory port\n")
    print("| kernel | shape | elements | model cycles | RTL cocotb | RTL fast | elem/cycle "
          "(peak {0}) | vector busy | bit-exact |".format(lanes))
    print("|---|---|---|---|---|---|---|---|---|")
    for k, o, elems in suite:
        seg = isa.segment(k.name)
        t = predict_segment(isa, seg, arch)
        cells = []
        exact = "—"
        for name in ("cocotb", "fast"):
            if name in runs:
                run = runs[name][0]
                rec = next(r for r in run.records if r["task"] == k.name)
                ok = _same(run.outputs[k.name], kernel_reference(k, arch, *o))
                cells.append(f"{rec['cycles']:,}" + ("" if rec["cycles"] == t.cycles else " ≠"))
                exact = "yes" if ok and exact in ("—", "yes") else "NO"
            else:
                cells.append("—")
        print(f"| {k.name} | {'x'.join(map(str, k.shape))} | {elems:,} | {t.cycles:,} | "
              f"{cells[0]} | {cells[1]} | {elems / t.cycles:.2f} | "
              f"{t.vector_cycles / t.cycles:.0%} | {exact} |")
    if runs:
        total = sum(r["cycles"] for r in runs["cocotb"][0].records)
        print(f"\nRTL wall time for all {len(suite)} kernels ({total:,} cycles): cocotb "
              f"{runs['cocotb'][1]:.2f} s ({total / runs['cocotb'][1]:,.0f} cycles/s), fast "
              f"driver {runs['fast'][1]:.2f} s ({total / runs['fast'][1]:,.0f} cycles/s): "
              f"{runs['cocotb'][1] / runs['fast'][1]:.1f}x (process start-up included)")


if __name__ == "__main__":
    main()
