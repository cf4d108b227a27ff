"""Analytical mapper vs. the tiled cycle model on GEMMs from the real LLM configs.

Usage:  python benchmarks/mapper_vs_cycle_model.py [--arch ws16x16 ...] [--samples 3] [--quiet]

For each op (attention projections, attention score/context GEMMs, FFN, Mixtral and DeepSeek-V3
experts at their average routed token counts, Mamba projections; prefill of 2048 tokens and
decode batches of 1-64) and each ArchSpec (ws16x16, os16x16 presets, a 32x32 WS design and a
bandwidth-starved 32x32 OS design on which decode is bandwidth-bound), the
mapper (:func:`tilewright.compiler.gemm_mapper.map_gemm`) picks a mapping; the tiled cycle model
(:func:`tilewright.dataflow_sim.tiled.simulate_tiled`) runs that mapping tile by tile. Printed:
per-op analytical and tiled cycles and the error ``(analytical - tiled) / tiled``; the summary
(mean / max absolute error); and the mapper's speed in design points (op x mapping) evaluated per
second. ``--samples N`` also runs N random feasible mappings per op (up to 50k tiles each)
through both models, to show the error away from the chosen mapping. Shapes are read from
:func:`tilewright.models.llm_configs.describe` (weights ``[out, in]`` -> K = in, N = out).
Prints only; never asserts timings.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from tilewright.arch import ArchSpec, load_arch
from tilewright.compiler.gemm_mapper import GemmOp, map_gemm
from tilewright.dataflow_sim.tiled import simulate_tiled
from tilewright.models.llm_configs import describe, get_config

PREFILL = 2048
DECODE = (1, 16, 64)


def arch_32x32() -> ArchSpec:
    """A larger WS design: 32x32 PEs, 256 KiB scratchpad and accumulator, 64 GB/s."""
    return ArchSpec.from_dict({
        "name": "ws32x32", "clock_mhz": 500.0,
        "tensor_engine": {"rows": 32, "cols": 32, "dataflow": "ws"},
        "memory": {"scratchpad_kib": 256, "accumulator_kib": 256},
        "offchip": {"bandwidth_gbps": 64.0, "latency_ns": 100.0}})


def arch_os32x32_lp() -> ArchSpec:
    """A bandwidth-starved OS design: 32x32 PEs at 1 GHz, 256 KiB buffers, 12.8 GB/s, 120 ns
    (an LPDDR-class edge part; decode and small-batch ops are bandwidth-bound on it)."""
    return ArchSpec.from_dict({
        "name": "os32x32-lp", "clock_mhz": 1000.0,
        "tensor_engine": {"rows": 32, "cols": 32, "dataflow": "os"},
        "memory": {"scratchpad_kib": 256, "accumulator_kib": 256},
        "offchip": {"bandwidth_gbps": 12.8, "latency_ns": 120.0}})


DESIGNS = {"ws32x32": arch_32x32, "os32x32-lp": arch_os32x32_lp}


def _linear(ops: list[GemmOp], name: str, shapes: dict, weight: str, tokens: int,
            tag: str) -> None:
    n, k = shapes[weight][-2:]
    ops.append(GemmOp(f"{name}.{weight.removesuffix('.weight')}.{tag}", tokens, k, n))


def llama_ops(name: str, decode: tuple[int, ...]) -> list[GemmOp]:
    """wq, wk (= wv), wo, w1 (= w3), w2 at prefill and decode; QK^T and PV per head."""
    d = describe(name)
    shapes, cfg = d["layer_param_shapes"], get_config(name)
    ops: list[GemmOp] = []
    for tokens, tag in [(PREFILL, f"prefill{PREFILL}")] + [(b, f"decode{b}") for b in decode]:
        for w in ("attn.wq.weight", "attn.wk.weight", "ffn.w1.weight", "ffn.w2.weight"):
            _linear(ops, name, shapes, w, tokens, tag)
    h, hd = cfg.n_heads, cfg.head_dim
    ops += [GemmOp(f"{name}.qk.prefill{PREFILL}", PREFILL, hd, PREFILL, batch=h),
            GemmOp(f"{name}.pv.prefill{PREFILL}", PREFILL, PREFILL, hd, batch=h),
            GemmOp(f"{name}.qk.decode1.ctx{PREFILL}", 1, hd, PREFILL, batch=h),
            GemmOp(f"{name}.pv.decode1.ctx{PREFILL}", 1, PREFILL, hd, batch=h)]
    return ops


def moe_ops(name: str, token_counts: dict[str, int]) -> list[GemmOp]:
    """Per-expert gate/up and down GEMMs with the given routed token counts; shared and dense
    FFNs where the config has them."""
    d = describe(name)
    shapes, cfg = d["layer_param_shapes"], get_config(name)
    ops: list[GemmOp] = []
    for tag, tokens in token_counts.items():
        for w in ("w_gate", "w_down"):
            _linear(ops, name, shapes, w, tokens, tag)
    if cfg.n_shared_experts:
        for tokens, tag in ((PREFILL, f"prefill{PREFILL}"), (64, "decode64")):
            for w in ("shared.w1.weight", "shared.w2.weight"):
                _linear(ops, name, shapes, w, tokens, tag)
    if cfg.d_dense_ffn:
        ops += [GemmOp(f"{name}.dense.w1.prefill{PREFILL}", PREFILL, cfg.d_model, cfg.d_dense_ffn),
                GemmOp(f"{name}.dense.w2.prefill{PREFILL}", PREFILL, cfg.d_dense_ffn, cfg.d_model)]
    return ops


def mamba_ops(name: str) -> list[GemmOp]:
    """in_proj, x_proj, dt_proj, out_proj at prefill and decode 1."""
    shapes = describe(name)["layer_param_shapes"]
    ops: list[GemmOp] = []
    for tokens, tag in ((PREFILL, f"prefill{PREFILL}"), (1, "decode1")):
        for w in ("mixer.in_proj.weight", "mixer.x_proj.weight", "mixer.dt_proj.weight",
                  "mixer.out_proj.weight"):
            _linear(ops, name, shapes, w, tokens, tag)
    return ops


def suite() -> list[GemmOp]:
    """The benchmark's ops (see the module docstring)."""
    mix = get_config("mixtral-8x7b")
    ds = get_config("deepseek-v3")
    avg = lambda tokens, cfg: max(1, tokens * cfg.top_k // cfg.n_experts)  # noqa: E731
    ops = llama_ops("llama3-8b", DECODE) + llama_ops("llama3-70b", (1, 64))
    # Mixtral: balanced prefill (512 tokens/expert), a hot and a cold expert, decode batch 64
    ops += moe_ops("mixtral-8x7b", {"prefill.avg": avg(PREFILL, mix),
                                    "prefill.hot": 2 * avg(PREFILL, mix),
                                    "prefill.cold": avg(PREFILL, mix) // 4,
                                    "decode64.avg": avg(64, mix)})
    ops += moe_ops("deepseek-v3", {"prefill.avg": avg(PREFILL, ds), "decode64.avg": avg(64, ds)})
    ops += mamba_ops("mamba-130m") + mamba_ops("mamba-2.8b")
    return ops


def _cmp(op: GemmOp, arch: ArchSpec, mapping) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    tiled = simulate_tiled(op, arch, mapping)
    return tiled.cycles, time.perf_counter() - t0, tiled.n_tiles


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="*", default=["ws16x16", "os16x16", "ws32x32", "os32x32-lp"],
                    help="presets or YAML files; 'ws32x32' and 'os32x32-lp' are defined here")
    ap.add_argument("--samples", type=int, default=2,
                    help="random feasible mappings per op also compared (default 2)")
    ap.add_argument("--quiet", action="store_true", help="summary only")
    args = ap.parse_args()
    archs = [DESIGNS[a]() if a in DESIGNS else load_arch(a) for a in args.arch]
    console = Console(width=180)
    ops = suite()
    console.print(f"{len(ops)} ops x {len(archs)} ArchSpecs; convention: tilewright (RTL) "
                  "command cycles, DMA in real-valued cycles")
    table = Table(title="analytical mapper vs tiled cycle model (best mapping per op)")
    for c in ("arch", "op", "B x M x K x N", "tile m,k,n", "order", "tiles", "bound", "util",
              "analytical", "tiled", "error %"):
        table.add_column(c, justify="right")
    rng = np.random.default_rng(0)
    errs: dict[str, list[float]] = {a.name: [] for a in archs}
    sample_errs: list[float] = []
    evaluated, map_s, tiles, tiled_s = 0, 0.0, 0, 0.0
    for arch in archs:
        for op in ops:
            res = map_gemm(op, arch)
            evaluated += res.evaluated
            map_s += res.seconds
            cyc, dt, nt = _cmp(op, arch, res.mapping)
            tiles, tiled_s = tiles + nt, tiled_s + dt
            err = (res.cost.cycles - cyc) / cyc
            errs[arch.name].append(err)
            mp, c = res.mapping, res.cost
            table.add_row(arch.name, op.name, f"{op.batch}x{op.m}x{op.k}x{op.n}",
                          f"{mp.m_t},{mp.k_t},{mp.n_t}", mp.order, f"{c.n_tiles:,}", c.bound,
                          f"{c.utilization:.3f}", f"{c.cycles:,.0f}", f"{cyc:,.0f}",
                          f"{100 * err:+.3f}")
            cols = res.space.columns
            pool = np.flatnonzero(cols["n_tiles"] <= 50_000)
            for i in rng.choice(pool, min(args.samples, len(pool)), replace=False):
                cyc_i, _, _ = _cmp(op, arch, res.space.mapping(int(i)))
                sample_errs.append((cols["cycles"][i] - cyc_i) / cyc_i)
    if not args.quiet:
        console.print(table)
    summary = Table(title="summary: |analytical - tiled| / tiled")
    for c in ("ArchSpec", "ops", "mean |err| %", "max |err| %", "max over-estimate %",
              "max under-estimate %"):
        summary.add_column(c, justify="right")
    every = []
    for name, e in errs.items():
        a = np.array(e)
        every += e
        summary.add_row(name, str(len(a)), f"{100 * np.abs(a).mean():.3f}",
                        f"{100 * np.abs(a).max():.3f}", f"{100 * max(a.max(), 0):.3f}",
                        f"{100 * max(-a.min(), 0):.3f}")
    a = np.array(every)
    summary.add_row("all (best mappings)", str(len(a)), f"{100 * np.abs(a).mean():.3f}",
                    f"{100 * np.abs(a).max():.3f}", f"{100 * max(a.max(), 0):.3f}",
                    f"{100 * max(-a.min(), 0):.3f}")
    if sample_errs:
        s = np.array(sample_errs)
        summary.add_row("random mappings", str(len(s)), f"{100 * np.abs(s).mean():.3f}",
                        f"{100 * np.abs(s).max():.3f}", f"{100 * max(s.max(), 0):.3f}",
                        f"{100 * max(-s.min(), 0):.3f}")
    console.print(summary)
    console.print(f"mapper: {evaluated:,} design points (op x mapping) in {map_s:.2f} s = "
                  f"{evaluated / map_s:,.0f} mappings/s ({evaluated / (len(ops) * len(archs)):,.0f}"
                  f" per op, {1e3 * map_s / (len(ops) * len(archs)):.1f} ms per op)")
    console.print(f"tiled cycle model (best mappings): {tiles:,} tiles in {tiled_s:.2f} s = "
                  f"{tiles / tiled_s:,.0f} tiles/s")


if __name__ == "__main__":
    main()
