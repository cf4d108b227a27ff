"""Partitioning one transformer layer across a wafer-scale mesh, for prefill and decode.

Placement (WaferLLM, OSDI 2025, section "wafer-scale LLM parallelism"):

* **Prefill** — activations ``X[S, d]``: sequence S on the mesh rows, embedding d on the
  columns of the square healthy grid; every projection and both attention products are
  MeshGEMMs (:func:`~tilewright.dataflow_sim.mesh.gemm.mesh_gemm`). A MeshGEMM leaves C block
  (i, j) on core (i, j) — the layout the next GEMM's A needs — so no re-layout between GEMMs.
* **Decode** (one token) — every weight matrix is spread over the *whole* rectangular mesh
  (K on rows, N on columns) and each projection is a MeshGEMV (vector broadcast along rows,
  local GEMV, K-tree all-reduce along columns).
* Norms, RoPE, softmax, SiLU and residuals are vector work on the cores: ``elements per core x
  ops per element / core_macs_per_cycle`` cycles (the core's SIMD lanes are its MAC lanes), plus
  a K-tree all-reduce along the embedding axis for each row reduction (RMSNorm sum of squares,
  softmax max and sum). No op is free.
* **KV cache** — tokens on the rows, the 2 x kv_heads x head_dim features on the columns. A
  *concatenating* cache appends each new token's K/V to the tail row, so decode stops when the
  tail row's cores are full; the *shift-based* cache (WaferLLM) makes every row pass its oldest
  token to the next row each step, so all rows fill evenly: capacity grows by ~the number of
  rows. The shift costs one 1-hop message per core per layer per token.

Approximations (stated, not hidden): attention over H heads is costed as one GEMM/GEMV with the
heads concatenated along the contraction (same MACs and operand volume; the H score matrices
are not held separately); GQA's sharing of K/V between query heads is ignored in attention
traffic (counted in KV capacity); the decode vector's re-layout from a GEMV's output
(split along columns) to the next GEMV's input (split along rows) is costed as the
row broadcast of MeshGEMV. :func:`plan_layer` costs each op with :func:`mesh_gemm` /
:func:`mesh_gemv`; the same partitioning as a ``Program`` of ``mesh_phase`` tasks comes from
:func:`tilewright.compiler.mesh_partition.partition_layer` and is costed by
:func:`~tilewright.dataflow_sim.mesh.run_mesh_program` (the two agree cycle for cycle).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.mesh_partition import decoder_layer_ops, prefill_gemm_specs
from tilewright.compiler.mesh_schedule import kv_shift_specs, row_allreduce_specs
from tilewright.dataflow_sim.mesh.gemm import mesh_gemm
from tilewright.dataflow_sim.mesh.gemv import mesh_gemv
from tilewright.dataflow_sim.mesh.capacity import (embedding_bytes, kv_bytes_per_core,
                                                   llama_layer_weight_bytes)
from tilewright.dataflow_sim.mesh.grid import defect_grid, healthy_grid, reroute
from tilewright.dataflow_sim.mesh.model import MeshMappingError, message_cycles, simulate
from tilewright.dataflow_sim.mesh.program_run import to_phases
from tilewright.models.llm_shapes import LlamaConfig, get_config

__all__ = ["LayerOp", "LayerPlan", "plan_layer", "kv_cache_capacity", "row_allreduce_cycles",
           "WaferPlan", "wafer_link_us", "choose_wafers"]


@dataclass
class LayerOp:
    name: str
    kind: str          # gemm | gemv | vector | kv-shift
    detail: str
    cycles: int


@dataclass
class LayerPlan:
    model: str
    phase: str
    arch: str
    clock_mhz: float
    tokens: int
    context: int
    ops: list[LayerOp] = field(default_factory=list)
    notes: dict = field(default_factory=dict)

    @property
    def cycles(self) -> int:
        return sum(o.cycles for o in self.ops)

    @property
    def us(self) -> float:
        return self.cycles / self.clock_mhz

    def table(self):
        import pandas as pd  # noqa: PLC0415  (lazy: pandas is heavy)
        return pd.DataFrame([o.__dict__ for o in self.ops])

    def summary(self) -> dict:
        return {"model": self.model, "phase": self.phase, "arch": self.arch,
                "tokens": self.tokens, "context": self.context, "layer_cycles": self.cycles,
                "layer_us": round(self.us, 3), **self.notes}


@lru_cache(maxsize=256)
def row_allreduce_cycles(arch: ArchSpec, values: int, pc: int | None = None,
                         elem_bytes: int = 2, levels: int = 2, defects: str = "skip") -> int:
    """Cycles of a K-tree all-reduce of ``values`` elements along every row of the healthy
    grid (over its columns; ``defects`` policy of :mod:`.grid`), result on every core of the
    row."""
    grid = defect_grid(arch.mesh, defects, pc=pc)
    specs, _ = reroute(row_allreduce_specs(grid, values * elem_bytes, levels), arch.mesh, defects)
    phases = to_phases(specs, arch.mesh.link_bytes_per_cycle)
    mask = grid.mask()
    return simulate(arch, phases, op="allreduce", algo="ktree", shape={"values": values},
                    cores=mask, memory_bytes=np.zeros(mask.shape), useful_macs=0).cycles


@lru_cache(maxsize=256)
def _gemm(arch: ArchSpec, m: int, k: int, n: int, algo: str, elem_bytes: int,
          defects: str = "skip") -> int:
    return mesh_gemm(arch, m, k, n, algo=algo, elem_bytes=elem_bytes, defects=defects).cycles


@lru_cache(maxsize=256)
def _causal_gemm(arch: ArchSpec, m: int, k: int, n: int, algo: str, elem_bytes: int,
                 defects: str = "skip") -> int:
    """Cycles of a causal prefill attention product (the compiler's masked MeshGEMM phases,
    :func:`~tilewright.compiler.mesh_partition.prefill_gemm_specs`), on the square grid."""
    grid = defect_grid(arch.mesh, defects, square=True)
    p = grid.pr
    specs = prefill_gemm_specs(algo, grid, -(-m // p), -(-k // p), -(-n // p), elem_bytes,
                               causal=True)
    specs, _ = reroute(specs, arch.mesh, defects)
    phases = to_phases(specs, arch.mesh.link_bytes_per_cycle)
    mask = grid.mask()
    return simulate(arch, phases, op="gemm", algo=algo, shape={"m": m, "k": k, "n": n},
                    cores=mask, memory_bytes=np.zeros(mask.shape), useful_macs=0).cycles


@lru_cache(maxsize=256)
def _gemv(arch: ArchSpec, k: int, n: int, algo: str, elem_bytes: int,
          defects: str = "skip") -> int:
    return mesh_gemv(arch, k, n, algo=algo, elem_bytes=elem_bytes, defects=defects).cycles


def _vector_cycles(arch: ArchSpec, elems_per_core: int, ops_per_elem: int) -> int:
    return -(-elems_per_core * ops_per_elem // arch.mesh.core_macs_per_cycle)


def _llama(model: str):
    cfg = get_config(model)
    if not isinstance(cfg, LlamaConfig):
        raise MeshMappingError(f"{model}: mesh partitioning covers Llama-style dense decoders; "
                               f"{type(cfg).__name__} is not supported yet")
    return cfg


def plan_layer(arch: ArchSpec, model: str = "llama3-8b", phase: str = "prefill", *,
               tokens: int = 4096, context: int = 4096, algo: str | None = None,
               elem_bytes: int = 2, defects: str = "skip") -> LayerPlan:
    """Per-op mesh time of one decoder layer of ``model`` on ``arch.mesh``.

    prefill: ``tokens`` prompt tokens at once (MeshGEMM, or ``algo`` = cannon | summa);
    decode: one new token attending to ``context`` cached tokens (MeshGEMV, or ``allreduce``).
    ``defects``: ``skip`` | ``route`` (:data:`~tilewright.dataflow_sim.mesh.grid.DEFECT_POLICIES`).
    """
    if arch.mesh is None:
        raise MeshMappingError(f"{arch.name}: the ArchSpec has no mesh section")
    if phase not in ("prefill", "decode"):
        raise MeshMappingError(f"phase {phase!r}: must be 'prefill' or 'decode'")
    cfg = _llama(model)
    kvd = cfg.n_kv_heads * cfg.head_dim
    plan = LayerPlan(model, phase, arch.name, arch.clock_mhz, tokens if phase == "prefill" else 1,
                     context)
    ops = plan.ops
    if phase == "prefill":
        algo = algo or "mesh"
        p = defect_grid(arch.mesh, defects, square=True).pr

        def gemm(name, m, k, n, causal):
            cyc = _causal_gemm(arch, m, k, n, algo, elem_bytes, defects) if causal else \
                _gemm(arch, m, k, n, algo, elem_bytes, defects)
            ops.append(LayerOp(name, "gemm", f"{algo} [{m},{k}]x[{k},{n}]"
                               + (" causal" if causal else ""), cyc))

        def vec(name, elems, ops_per, reductions=0, red_values=0):
            cyc = _vector_cycles(arch, elems, ops_per)
            cyc += reductions * row_allreduce_cycles(arch, red_values, pc=p, defects=defects)
            ops.append(LayerOp(name, "vector", f"{elems} elem/core x {ops_per} ops"
                               + (f" + {reductions} row all-reduce of {red_values}"
                                  if reductions else ""), cyc))

        for op in decoder_layer_ops(cfg, phase, tokens=tokens, context=context, pr=p, pc=p):
            if op.kind == "gemm":
                gemm(op.name, op.m, op.k, op.n, op.causal)
            else:
                vec(op.name, op.elems, op.ops_per, op.reductions, op.red_values)
        plan.notes.update(grid=f"{p}x{p}", algo=algo)
    else:
        algo = algo or "mesh"
        grid = defect_grid(arch.mesh, defects)
        pr, pc = grid.pr, grid.pc

        def gemv(name, k, n):
            ops.append(LayerOp(name, "gemv", f"{algo} [1,{k}]x[{k},{n}]",
                               _gemv(arch, k, n, algo, elem_bytes, defects)))

        def vec(name, elems, ops_per, reductions=0, red_values=0):
            cyc = _vector_cycles(arch, elems, ops_per)
            cyc += reductions * row_allreduce_cycles(arch, red_values, pc=pc, defects=defects)
            ops.append(LayerOp(name, "vector", f"{elems} elem/core x {ops_per} ops"
                               + (f" + {reductions} row all-reduce of {red_values}"
                                  if reductions else ""), cyc))

        for op in decoder_layer_ops(cfg, phase, tokens=tokens, context=context, pr=pr, pc=pc):
            if op.kind == "gemv":
                gemv(op.name, op.k, op.n)
            else:
                vec(op.name, op.elems, op.ops_per, op.reductions, op.red_values)
        nbytes = -(-2 * kvd // pc) * elem_bytes          # one token's K/V per core per layer
        specs, _ = reroute(kv_shift_specs(grid, nbytes), arch.mesh, defects)
        shift = simulate(arch, to_phases(specs, arch.mesh.link_bytes_per_cycle), op="kv-shift",
                         algo="shift", shape={"bytes": nbytes}, cores=grid.mask(),
                         memory_bytes=np.zeros((arch.mesh.rows, arch.mesh.cols)),
                         useful_macs=0).cycles
        ops.append(LayerOp("kv-cache shift", "kv-shift",
                           f"message of {nbytes} B per core to the next row", shift))
        plan.notes.update(grid=f"{pr}x{pc}", algo=algo)
    return plan


def kv_cache_capacity(arch: ArchSpec, model: str = "llama3-8b", *, prompt: int = 0,
                      elem_bytes: int = 2, reserve_bytes: int = 4096) -> dict:
    """Maximum decode length with a shift-based vs a concatenating KV cache, given per-core SRAM.

    Each core keeps its block of every layer's decode weights and of the embedding table and LM
    head (:mod:`.capacity`) plus ``reserve_bytes`` of buffers; the rest holds KV. Tokens sit on
    rows; a token's 2 x kv_heads x head_dim features of every layer are spread over the columns.
    """
    cfg = _llama(model)
    grid = healthy_grid(arch.mesh)
    pr, pc = grid.pr, grid.pc
    weights = llama_layer_weight_bytes(cfg, "decode", pr, pc, elem_bytes) * cfg.n_layers \
        + sum(embedding_bytes(cfg, pr, pc, elem_bytes))
    sram = int(arch.mesh.core_sram_kib * 1024)
    free = sram - weights - reserve_bytes
    per_tok_layer = kv_bytes_per_core(cfg, 1, pr, pc, elem_bytes, 1)
    per_tok = per_tok_layer * cfg.n_layers
    if free < per_tok:
        raise MeshMappingError(
            f"{model} on {arch.name}: weights need {weights} B per core (+{reserve_bytes} B "
            f"buffers) of {sram} B SRAM, leaving {free} B: less than one token's KV "
            f"({per_tok} B per core)")
    tokens_per_core = free // per_tok
    prompt_per_row = -(-prompt // pr)
    concat = max(0, tokens_per_core - prompt_per_row)           # only the tail row grows
    shift = max(0, tokens_per_core * pr - prompt)                # every row fills evenly
    return {"model": model, "grid": f"{pr}x{pc}", "weight_bytes_per_core": weights,
            "free_bytes_per_core": free, "kv_bytes_per_token_per_core": per_tok,
            "kv_bytes_per_token_per_core_per_layer": per_tok_layer,
            "tokens_per_core": int(tokens_per_core), "prompt": prompt,
            "max_decode_concat": int(concat), "max_decode_shift": int(shift),
            "ratio": (shift / concat) if concat else math.inf,
            "shift_cycles_per_layer": message_cycles(arch.mesh, per_tok_layer, 1, 1)}


# ---- several wafers: layers pipelined over wafers joined by a link --------------------------

@dataclass
class WaferPlan:
    """The model's layers split over ``wafers`` wafers (contiguous runs, :func:`~.capacity.
    wafer_stages`); one request crosses every stage in turn and the link between consecutive
    wafers ``wafers - 1`` times. ``stage_us``: layers x one layer's time (+ the end-to-end
    extras the caller adds to the first/last stage)."""

    wafers: int
    layers: list[int]
    stage_us: list[float]
    link_bytes: int
    link_us: float

    @property
    def latency_us(self) -> float:
        """One request end to end: every stage plus every link crossing."""
        return sum(self.stage_us) + (self.wafers - 1) * self.link_us

    @property
    def interval_us(self) -> float:
        """Pipelined: a new request can enter every slowest-stage (or link) time."""
        return max(self.stage_us + ([self.link_us] if self.wafers > 1 else []))

    def summary(self) -> dict:
        return {"wafers": self.wafers, "layers_per_wafer": self.layers,
                "stage_us": [round(u, 6) for u in self.stage_us],
                "link_bytes": self.link_bytes, "link_us": round(self.link_us, 6),
                "latency_us": round(self.latency_us, 6),
                "pipelined_interval_us": round(self.interval_us, 6)}


def wafer_link_us(arch: ArchSpec, nbytes: int, wafers: int, asked: str | None = None) -> float:
    """Time of ``nbytes`` over the inter-wafer link (``mesh.wafer_link_latency_us +
    nbytes / mesh.wafer_link_gbytes_per_s``); 0 on one wafer. A plan over several wafers with
    no link in the ArchSpec is refused."""
    if wafers == 1:
        return 0.0
    mesh = arch.mesh
    if mesh.wafer_link_gbytes_per_s is None or mesh.wafer_link_latency_us is None:
        raise MeshMappingError(
            f"--wafers {asked or wafers}: a plan over {wafers} wafers, but {arch.name} has no "
            "inter-wafer link; a plan over several "
            "wafers needs mesh.wafer_link_gbytes_per_s and mesh.wafer_link_latency_us in the "
            "ArchSpec")
    return mesh.wafer_link_latency_us + nbytes / (mesh.wafer_link_gbytes_per_s * 1e3)


def choose_wafers(capacity_of, n_layers: int, asked: str | int | None):
    """(wafers, Capacity of the fullest wafer): ``asked`` wafers (refused when they do not
    hold the model), or with ``"auto"`` the fewest that do. ``capacity_of(w)``: the
    :class:`~.capacity.Capacity` of a plan over ``w`` wafers."""
    if asked in (None, 1, "1"):
        return 1, capacity_of(1).check(
            "split the layers over several wafers with --wafers N|auto (needs an inter-wafer "
            "link in the ArchSpec), a shorter --context/--tokens, or a larger mesh")
    if asked == "auto":
        for w in range(1, n_layers + 1):
            cap = capacity_of(w)
            if cap.fits:
                return w, cap
        capacity_of(n_layers).check("even one layer per wafer does not fit")
    try:
        w = int(asked)
    except (TypeError, ValueError):
        w = 0
    if not 1 <= w <= n_layers:
        raise MeshMappingError(f"--wafers {asked!r}: accepted: an integer from 1 to the model's "
                               f"{n_layers} layers, or 'auto'")
    return w, capacity_of(w).check("use more wafers (--wafers auto picks the fewest that fit)")
