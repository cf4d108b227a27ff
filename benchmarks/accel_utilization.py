"""Utilization of the accelerator top on a 256x256x256 int8 GEMM, DMA included.

For each config (default: configs/ws16x16.yaml and configs/os16x16.yaml) the GEMM is compiled by
:func:`tilewright.compiler.codegen.codegen_gemms` and timed by the exact cycle model
(:mod:`tilewright.dataflow_sim.accel_timing`); with ``--rtl`` it also runs on the Verilated top
(cocotb bench with the external-memory model) and checks C against numpy and the cycles against
the model. Utilization = M·K·N / (peak·cycles), peak = rows·cols·depth MAC/cycle (systolic or a
tile-MAC kind), cycles = start -> END (counting every DMA
transfer, the first loads and the last store). The table also shows what limits it: the GEMM
core's own busy cycles (fold period / fill and drain), the DMA cycles not hidden behind GEMMs,
and the controller.

Usage: ``python benchmarks/accel_utilization.py [--rtl] [--size 256] [--engines | CONFIG.yaml ...]``
(``--engines``: the tile-MAC families instead, on ws16x16's memories and memory port)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from tilewright.arch import load_arch
from tilewright.compiler.codegen import (beat_bytes, beats_per_word, codegen_gemms,
                                         memory_latency_cycles)
from tilewright.dataflow_sim.accel_timing import predict_segment, serial_cycles

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [ROOT / "configs" / "ws16x16.yaml", ROOT / "configs" / "os16x16.yaml"]


def _rtl(arch, size: int):
    """(RTL cycles, C equal to numpy) of the size^3 GEMM on the Verilated top."""
    from tilewright.cosim import sim as cosim  # noqa: PLC0415
    from tilewright.cosim.suites import gemm_suite  # noqa: PLC0415
    prog, inputs = gemm_suite(arch, [(size, size, size, "random")])
    t0 = time.perf_counter()
    run = cosim.run("accel", prog, arch, inputs=inputs,
                    log=lambda m: print(f"  [{arch.name}] {m}"))
    task = prog.gemms()[0]
    ref = (inputs[task.a].astype(np.int64) @ inputs[task.b].astype(np.int64)).astype(np.int32)
    ok = np.array_equal(run.outputs[task.out], ref)
    return run.records[0]["cycles"], ok, time.perf_counter() - t0, run.sim_seconds


def _engine_archs():
    """The three tile-MAC families at 16 or 64 MACs/cycle on ws16x16's memories and port: 64 KiB
    scratchpad/accumulator, 16 GB/s at 500 MHz, 100 ns."""
    from tilewright.arch import ArchSpec  # noqa: PLC0415
    base = load_arch(CONFIGS[0]).model_dump(mode="json", exclude_none=True)
    out = []
    for name, te in (("adder_tree1x16x1", {"kind": "adder_tree", "rows": 1, "depth": 16, "cols": 1}),
                     ("outer_product8x8", {"kind": "outer_product", "rows": 8, "cols": 8}),
                     ("cube4x4x4", {"kind": "cube", "rows": 4, "depth": 4, "cols": 4})):
        spec = {**base, "name": name,
                "tensor_engine": {**base["tensor_engine"], **te, "dataflow": "ws"}}
        out.append(ArchSpec.from_dict(spec))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("configs", nargs="*", type=Path, default=None)
    ap.add_argument("--engines", action="store_true",
                    help="the tile-MAC families (adder_tree 1x16x1, outer_product 8x8, cube "
                         "4x4x4) on ws16x16's memories instead of the configs")
    ap.add_argument("--size", type=int, default=256, help="M = K = N of the GEMM")
    ap.add_argument("--rtl", action="store_true", help="also run the Verilated top (slow)")
    args = ap.parse_args()
    s = args.size
    rows = []
    archs = (_engine_archs() if args.engines
             else [load_arch(p) for p in (args.configs or CONFIGS)])
    for arch in archs:
        te = arch.tensor_engine
        isa = codegen_gemms(arch, [(s, s, s)])
        seg = isa.segments[0]
        t = predict_segment(isa, seg, arch)
        peak = te.macs_per_cycle
        util = s ** 3 / (peak * t.cycles)
        gemm_only = s ** 3 / (peak * t.gemm_cycles)
        row = {"config": arch.name, "engine": te.describe(), "W B/beat": beat_bytes(arch),
               "L cyc": memory_latency_cycles(arch), "beats/word a,b,c":
               ",".join(str(v) for v in beats_per_word(arch).values()),
               "tiles": f"{len(seg.tiles)}x{seg.tiles[0].tm}x{s}x{seg.tiles[0].tn}",
               "model cycles": t.cycles, "util": f"{100 * util:.1f}%",
               "GEMM busy": t.gemm_cycles, "GEMM-only util": f"{100 * gemm_only:.1f}%",
               "DMA busy": t.dma_cycles, "exposed": t.cycles - t.gemm_cycles,
               "serial": serial_cycles(t)}
        if args.rtl:
            cyc, ok, secs, sim_s = _rtl(arch, s)
            row.update({"RTL cycles": cyc, "RTL==model": cyc == t.cycles, "C==numpy": ok,
                        "RTL sim s": f"{sim_s:.0f}", "sim kcyc/s": f"{cyc / sim_s / 1e3:.1f}",
                        "build+sim s": f"{secs:.0f}"})
        rows.append(row)
    cols = list(rows[0])
    width = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    print(f"\n{s}x{s}x{s} int8 GEMM on the accelerator top (cycles: start sampled -> END "
          f"issued; util = MKN / (peak MAC/cycle * cycles))")
    print("  ".join(c.rjust(width[c]) for c in cols))
    for r in rows:
        print("  ".join(str(r.get(c, "")).rjust(width[c]) for c in cols))
    print("\nexposed = cycles not covered by GEMM busy time: the first tile's loads (L + A + B "
          "beats), the last tile's store, SYNC/issue cycles; 'GEMM-only util' is the ceiling set "
          "by the core's fold period and fill/drain; 'serial' = the same code with no DMA/GEMM "
          "overlap.")
    for r in rows:
        u = float(r["util"].rstrip("%"))
        if u < 90:
            print(f"{r['config']}: {u:.1f}% < 90%: limited by "
                  + ("DMA (exposed cycles)" if r["exposed"] > 0.05 * r["model cycles"]
                     else "the core's fold period / fill-drain"))


if __name__ == "__main__":
    main()
