"""tilewright's mesh model beside the published WaferLLM (OSDI 2025) figures on a WSE-2.

Usage:  python benchmarks/mesh_vs_waferllm.py [--quick]

Prints, paper vs ours:
1. MeshGEMM vs SUMMA and Cannon: cycles, speed-up and MeshGEMM compute efficiency as the square
   grid grows (90x90 ... 720x720) for a 4096^3 and an 8192^3 fp16 GEMM on the WSE-2 preset.
   Paper: MeshGEMM 2-3x faster than SUMMA/Cannon, >70% efficiency at 720x720.
2. MeshGEMV [1,16K] x [16K,16K] on the full 750x994 WSE-2 preset. Paper: 1.2 us.
3. Llama3-8B: one layer's mesh time for prefill (4096 tokens) and decode (4096 context), and
   max decode length with a shift-based vs concatenating KV cache. Paper: ~2700 tokens/s/request
   decode on WSE-2; shift-based KV cache gives a ~360x longer maximum decode length.

Where ours differs and why (the model's conventions are in dataflow_sim/mesh/model.py):
* The speed-up of MeshGEMM depends on how communication-bound a step is. Our SUMMA uses
  hardware multicast (1 routing stage, alpha per hop) and double buffering, so with large
  blocks (compute-bound) it nearly matches MeshGEMM — it even wins slightly when MeshGEMM's
  alignment is not amortized — while with small blocks at 720x720 it is latency-bound
  (~alpha x P/2..P per step) and MeshGEMM wins by far more than 3x. The paper's fixed 2-3x sits
  between; we do not know its exact GEMM shapes, so we print both regimes.
* MeshGEMV: WaferLLM's kernel is timed with x already replicated along rows (its launch script
  loads it so); ``x preloaded`` reproduces that convention, ``with x broadcast`` adds the row
  broadcast a decode step needs. Our model omits per-task software overheads of the CSL kernel
  (task switches, DSD setup), which is the expected direction of the remaining gap.
* The KV ratio is ~ the number of mesh rows holding tokens (750 here); the paper's 360x reflects
  its own placement. Decode tokens/s below = 1 / (layers x layer time), no LM head.
This script prints; it never asserts (timing claims are checked in tests/test_mesh_*.py).
"""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.table import Table

from tilewright.arch import load_arch
from tilewright.dataflow_sim.mesh import MeshMappingError, mesh_gemm, mesh_gemv


def gemm_table(console: Console, arch, sizes, grids) -> None:
    t = Table(title="MeshGEMM vs SUMMA vs Cannon on WSE-2 (fp16; paper: 2-3x faster, "
                    ">70% efficiency at 720x720)")
    for c in ("grid", "M=K=N", "block", "MeshGEMM cyc", "SUMMA cyc", "Cannon cyc",
              "vs SUMMA", "vs Cannon", "MeshGEMM eff", "SUMMA eff", "Cannon eff"):
        t.add_column(c, justify="right")
    mpc = arch.mesh.core_macs_per_cycle
    for n in sizes:
        for p in grids:
            try:
                r = {a: mesh_gemm(arch, n, n, n, algo=a, p=p) for a in ("mesh", "summa", "cannon")}
            except MeshMappingError as exc:      # blocks exceed the 48 KiB of a core
                t.add_row(f"{p}x{p}", str(n), "does not fit: " + str(exc).split(": ", 1)[1][:60])
                continue
            t.add_row(f"{p}x{p}", str(n), "x".join(map(str, r["mesh"].notes["block"])),
                      *(str(r[a].cycles) for a in ("mesh", "summa", "cannon")),
                      f"{r['summa'].cycles / r['mesh'].cycles:.2f}x",
                      f"{r['cannon'].cycles / r['mesh'].cycles:.2f}x",
                      *(f"{r[a].compute_efficiency(mpc):.0%}" for a in ("mesh", "summa", "cannon")))
    console.print(t)


def gemv_table(console: Console, arch) -> None:
    t = Table(title="MeshGEMV [1,16384] x [16384,16384] on WSE-2 750x994 (paper: 1.2 us)")
    for c in ("variant", "cycles", "us", "paper us", "ours / paper", "model wall s"):
        t.add_column(c, justify="right")
    for name, kw in (("MeshGEMV, x preloaded (paper's convention)", dict(broadcast_x=False)),
                     ("MeshGEMV, with x broadcast", dict(broadcast_x=True)),
                     ("ring all-reduce GEMV, x preloaded", dict(algo="allreduce",
                                                                 broadcast_x=False))):
        t0 = time.perf_counter()
        r = mesh_gemv(arch, 16384, 16384, **kw)
        wall = time.perf_counter() - t0
        paper = 1.2 if kw.get("algo", "mesh") == "mesh" else None
        t.add_row(name, str(r.cycles), f"{r.us:.3f}", f"{paper}" if paper else "-",
                  f"{r.us / paper:.2f}" if paper else "-", f"{wall:.2f}")
    console.print(t)
    r = mesh_gemv(arch, 16384, 16384, broadcast_x=False)
    console.print("MeshGEMV phases: " + ", ".join(f"{p.name} {p.total_cycles}" for p in r.phases))


def llm_table(console: Console, arch) -> None:
    from tilewright.dataflow_sim.mesh.llm import kv_cache_capacity, plan_layer  # noqa: PLC0415
    from tilewright.models.llm_configs import get_config  # noqa: PLC0415
    layers = get_config("llama3-8b").n_layers
    t = Table(title="Llama3-8B on WSE-2 (paper: ~2700 tokens/s/request decode)")
    for c in ("phase", "grid", "layer cycles", "layer us", "model ms (x layers)", "tokens/s"):
        t.add_column(c, justify="right")
    for phase in ("prefill", "decode"):
        p = plan_layer(arch, "llama3-8b", phase, tokens=4096, context=4096)
        ms = p.us * layers / 1000
        tps = (4096 if phase == "prefill" else 1) / (ms / 1000)
        t.add_row(f"{phase} ({'4096 tokens' if phase == 'prefill' else 'context 4096'})",
                  p.notes["grid"], str(p.cycles), f"{p.us:.1f}", f"{ms:.3f}", f"{tps:,.0f}")
    console.print(t)
    kv = kv_cache_capacity(arch, "llama3-8b", prompt=4096)
    console.print(f"KV cache after a 4096-token prompt: concatenating {kv['max_decode_concat']} "
                  f"tokens, shift-based {kv['max_decode_shift']} tokens = {kv['ratio']:.0f}x "
                  f"longer (paper: ~360x); weights {kv['weight_bytes_per_core']} B/core, "
                  f"KV {kv['kv_bytes_per_token_per_core']} B/token/core, shift "
                  f"{kv['shift_cycles_per_layer']} cycles/layer/token")


def main() -> None:
    quick = "--quick" in sys.argv
    console = Console(width=170)
    arch = load_arch("wse2")
    gemm_table(console, arch, (4096,) if quick else (4096, 8192),
               (90, 180, 360) if quick else (90, 180, 360, 720))
    gemv_table(console, arch)
    llm_table(console, arch)


if __name__ == "__main__":
    main()
