"""RTL mesh (Verilator) vs the mesh model: cycles per op and shape, and wall time as a ratio.

Runs MeshGEMV and MeshGEMM shapes on configs/mesh4x4.yaml in the RTL (one simulator process per
op, the build cached) and with the mesh model, both from the same mesh Program
(tilewright.compiler.mesh_ops); prints model cycles, RTL cycles, whether the outputs are
bit-exact vs numpy, and the wall time of the RTL run relative to the model's (the anchor,
measured in the same run). Then a MeshGEMV with a 1-level K-tree (streaming chain reductions)
and phases whose messages contend for links (pure transfers): RTL cycles vs the model's
contention rule (exact for the second; an upper bound for the first and third, which the RTL's
round-robin routers finish sooner — tilewright.dataflow_sim.mesh.flit_sim predicts them exactly).

    /work/venv/bin/python benchmarks/mesh_rtl_vs_model.py
"""

from __future__ import annotations

import time

import numpy as np

from tilewright.arch import load_arch
from tilewright.cosim.build import build
from tilewright.compiler.mesh_partition import MeshProgramBuilder
from tilewright.compiler.mesh_schedule import FlowBatch, PhaseSpec
from tilewright.cosim.mesh_rtl import rtl_gemm, rtl_gemv, rtl_transfers
from tilewright.dataflow_sim.mesh import mesh_gemm, mesh_gemv


def main() -> None:
    arch = load_arch("configs/mesh4x4.yaml")
    rng = np.random.default_rng(0)
    i8 = lambda *s: rng.integers(-128, 128, s).astype(np.int8)   # noqa: E731
    b = build("mesh", arch, log=print)
    print(f"build: cached={b.cached} generate {b.generate_seconds:.1f} s, "
          f"Verilator {b.build_seconds:.1f} s")
    gemv = [(i8(k), i8(k, n)) for k, n in ((64, 24), (128, 64), (256, 128))]
    gemm = [(i8(m, k), i8(k, n)) for m, k, n in ((16, 16, 16), (32, 32, 32), (64, 64, 64))]
    rows = []
    for op, cases, fn in (("gemv", gemv, rtl_gemv), ("gemm", gemm, rtl_gemm)):
        t0 = time.perf_counter()
        runs = fn(arch, cases)
        rtl_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for a, w in cases:
            if op == "gemv":
                mesh_gemv(arch, w.shape[0], w.shape[1], elem_bytes=1, acc_bytes=4)
            else:
                mesh_gemm(arch, *a.shape, w.shape[1], elem_bytes=1, acc_bytes=4)
        model_s = time.perf_counter() - t0
        for (a, w), r in zip(cases, runs):
            ref = (np.atleast_2d(a).astype(np.int64) @ w.astype(np.int64)).astype(np.int32)
            exact = bool((r.output == ref).all())
            shape = f"{np.atleast_2d(a).shape[0]}x{w.shape[0]}x{w.shape[1]}"
            rows.append((op, shape, r.model_cycles, r.rtl_cycles, exact))
        rows.append((op, "wall time RTL / model", "", f"{rtl_s / max(model_s, 1e-9):.0f}x", ""))
    x, w = gemv[1]
    run, = rtl_gemv(arch, [(x, w)], levels=1)          # streaming chain reductions
    exact = bool((run.output == (x.astype(np.int64) @ w.astype(np.int64)).astype(np.int32)).all())
    rows.append(("gemv", f"1x{w.shape[0]}x{w.shape[1]} 1-level K-tree", run.model_cycles,
                 run.rtl_cycles, exact))
    contend = {
        "two into (0,3) along row 0": FlowBatch.make([0, 0], [0, 1], [0, 0], [3, 3], [16, 24]),
        "one path twice": FlowBatch.make([1, 1], [0, 0], [3, 3], [2, 2], [8, 20]),
        "merge in column 2 (bound)": FlowBatch.make([0, 2], [2, 3], [3, 3], [2, 2], [16, 4]),
    }
    progs = []
    for name, flows in contend.items():
        pb = MeshProgramBuilder(name, arch)
        pb.add("transfer", [PhaseSpec(name, flows)], np.ones((4, 4), bool))
        progs.append(pb.program())
    for name, (rc, mc, ok) in zip(contend, rtl_transfers(arch, progs)):
        rows.append(("links", name, mc, rc, ok))
    print(f"{'op':5} {'M x K x N / phase':>30} {'model cycles':>13} {'RTL cycles':>11} "
          f"{'bit-exact':>9}")
    for op, shape, mc, rc, ex in rows:
        print(f"{op:5} {shape:>30} {mc!s:>13} {rc!s:>11} {ex!s:>9}")


if __name__ == "__main__":
    main()
