"""The double-buffered vector buffer: vector kernels' cycles with and without it, on the RTL.

    python benchmarks/vector_double_buffer.py [--single configs/ws8x8v.yaml]
        [--double configs/ws8x8vdb.yaml] [--no-rtl]

Runs the same kernels (a softmax-heavy attention-score softmax, a short-row softmax, SiLU, an
elementwise product, row sums and means, a requant, Mamba's scan) on two ArchSpecs that differ only in
``vector_unit.double_buffer``: the single-buffer code (each chunk loaded, computed and stored one
after the other) and the ping-pong code (:mod:`tilewright.compiler.vector_codegen`; the
controller's bank rule in :mod:`tilewright.compiler.codegen`). Per kernel and design: the cycle
model's cycles, the C++ fast driver's RTL cycles (asserted equal to the model), the vector
engine's beats (the VECTOR instructions' ``count``s and the SCANs' steps: its peak is one per
cycle) and their
share of the cycles, and the vector engine's busy share. Asserts the results of both designs
equal each other and the instruction-level model's bit for bit, and the RTL's cycles equal the
model's.
"""

from __future__ import annotations

import argparse

import numpy as np

from tilewright.arch import load_arch
from tilewright.compiler.codegen import disassemble
from tilewright.compiler.vector_codegen import VectorKernel, codegen_vector
from tilewright.dataflow_sim import scan_numerics as sn
from tilewright.dataflow_sim.accel_timing import predict_segment
from tilewright.dataflow_sim.vector_isa import kernel_reference


def _kernels(rng):
    q = lambda shape: rng.integers(-1500, 1500, shape)  # noqa: E731
    shapes = [("softmax", "row", "softmax", (64, 100)), ("softmax32", "row", "softmax", (64, 32)),
              ("silu", "elementwise", "silu", (4096,)), ("mul", "elementwise", "mul", (4096,)),
              ("rowsum", "row", "sum", (64, 64)), ("mean", "row", "mean", (64, 64))]
    out = []
    for name, kind, op, shape in shapes:
        k = VectorKernel(name, kind, op, shape)
        out.append((k, [q(shape) for _ in range(k.operands)]))
    acc = rng.integers(-(1 << 20), 1 << 20, (256, 64))
    out.append((VectorKernel("requant", "requant", "requant", acc.shape),
                [acc, rng.integers(1 << 20, 1 << 24, 64), rng.integers(20, 40, 64)]))
    bt, length, d, n = 1, 16, 64, 8          # Mamba's scan: one SCAN per channel
    out.append((VectorKernel("scan", "scan", "scan", (bt, length, d, n)),
                [sn.to_a_code(np.exp(-rng.uniform(0.01, 1, (bt, length, d, n)))),
                 sn.to_h_code(rng.normal(0, 1, (bt, length, d, n))),
                 sn.to_h_code(rng.normal(0, 1, (bt, length, n))),
                 sn.to_h_code(rng.normal(0, 1, (bt, d, n)))]))
    return out


def _same(a, b) -> bool:
    """Bit-equal results (a scan's is the pair y, final state)."""
    if isinstance(b, tuple):
        return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    return np.array_equal(a, b)


def _beats(isa, seg) -> int:
    """The vector engine's beats in one run of ``seg``: its VECTOR instructions' counts and its
    SCANs' steps (one per cycle at the peak)."""
    return sum(i.fields["count"] for i in disassemble(list(isa.words[seg.entry:seg.end + 1]))
               if i.op in ("VECTOR", "SCAN"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--single", default="configs/ws8x8v.yaml")
    ap.add_argument("--double", default="configs/ws8x8vdb.yaml")
    ap.add_argument("--no-rtl", action="store_true", help="cycle model only")
    args = ap.parse_args()
    archs = [load_arch(args.single), load_arch(args.double)]
    assert archs[1].vector_unit.double_buffer and not archs[0].vector_unit.double_buffer
    suite = _kernels(np.random.default_rng(0))
    kernels, ops = [k for k, _ in suite], {k.name: o for k, o in suite}
    rows: dict[str, list[str]] = {k.name: [] for k in kernels}
    results: dict[str, list] = {k.name: [] for k in kernels}
    for arch in archs:
        isa = codegen_vector(arch, kernels)
        run = None
        if not args.no_rtl:
            from tilewright.cosim import sim as cosim  # noqa: PLC0415
            from tilewright.cosim.program_jobs import KernelBatch  # noqa: PLC0415
            run = cosim.run("accel", KernelBatch(kernels, ops), arch, driver="fast")
        for k in kernels:
            seg = isa.segment(k.name)
            t = predict_segment(isa, seg, arch)
            ref = kernel_reference(k, arch, *ops[k.name], isa=isa)
            results[k.name].append(ref)
            rtl = "—"
            if run is not None:
                rec = next(r for r in run.records if r["task"] == k.name)
                assert rec["cycles"] == t.cycles, (arch.name, k.name, rec["cycles"], t.cycles)
                assert _same(run.outputs[k.name], ref), (arch.name, k.name)
                rtl = f"{rec['cycles']:,}"
            beats = _beats(isa, seg)
            rows[k.name].append(f"{t.cycles:,} | {rtl} | {beats:,} | {beats / t.cycles:.0%} | "
                                f"{t.vector_cycles / t.cycles:.0%}")
    for name, (a, b) in results.items():
        assert _same(a, b), f"{name}: the two designs' results differ"
    print(f"single buffer: {archs[0].name}; double buffer: {archs[1].name}; results bit-equal "
          f"across both and the instruction-level model"
          + ("" if args.no_rtl else "; RTL (fast driver) cycles == cycle model") + "\n")
    print("| kernel | shape | design | model cycles | RTL cycles | beats | beats / cycles "
          "(share of the vector unit's peak) | vector busy |")
    print("|---|---|---|---|---|---|---|---|")
    for k in kernels:
        for arch, row in zip(archs, rows[k.name]):
            print(f"| {k.name} | {'x'.join(map(str, k.shape))} | {arch.name} | {row} |")


if __name__ == "__main__":
    main()
