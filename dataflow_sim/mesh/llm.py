"""Partitioning one transformer layer across a wafer-scale mesh, for prefill and decode.

Placement (WaferLLM, OSDI 2025, section "wafer-scale LLM parallelism"):

* **Prefill** — activations ``X[S, d]``: sequence S on the mesh rows, embedding d on the
  columns of the square healthy grid; every projection and both attention products are
  MeshGEMMs (:func:`~tilewright.dataflow_sim.mesh.gemm.mesh_gemm`). A MeshGEMM leaves C block
  (i, j) on core (i, j) — the layout the next GEMM's A needs — so no re-layout between GEMMs.
  QK^T and PV are causal: each compute step does only the unmasked ``t(t+1)/2`` of a core's
  ``t x t`` query-key pairs (tokens striped over the grid:
  :func:`~tilewright.compiler.mesh_partition.causal_block_macs`).
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

Beyond one layer: :class:`WaferPlan` / :func:`choose_wafers` split the layers over wafers joined
by the ArchSpec's inter-wafer link (capacity: :mod:`.capacity`); :func:`embedding_lookup`,
:func:`final_norm_and_head` and :func:`handover` (prefill layout to decode layout) are the
end-to-end parts ``mesh-layer --all`` adds, each costed as mesh messages (docs/mesh-capacity.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.mesh_partition import decoder_layer_ops, prefill_gemm_specs
from tilewright.compiler.mesh_schedule import (FlowBatch, PhaseSpec, bcast_col_flows,
                                               kv_shift_specs, row_allreduce_specs)
from tilewright.dataflow_sim.mesh.gemm import mesh_gemm
from tilewright.dataflow_sim.mesh.gemv import mesh_gemv
from tilewright.dataflow_sim.mesh.capacity import (embedding_bytes, kv_bytes_per_core,
                                                   llama_layer_weight_bytes)
from tilewright.dataflow_sim.mesh.grid import defect_grid, healthy_grid, reroute
from tilewright.dataflow_sim.mesh.model import (MeshMappingError, MeshReport, message_cycles,
                                                simulate)
from tilewright.dataflow_sim.mesh.program_run import to_phases
from tilewright.models.llm_shapes import LlamaConfig, get_config

__all__ = ["LayerOp", "LayerPlan", "plan_layer", "kv_cache_capacity", "row_allreduce_cycles",
           "WaferPlan", "wafer_link_us", "choose_wafers", "handover", "embedding_lookup",
           "final_norm_and_head"]


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
    One layer's time only: whether the whole model fits the wafer is :mod:`.capacity`'s check
    (the commands run it first).
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


# ---- the whole model end to end: embedding, layers, final norm, LM head, handover ------------

def _overlaps(n: int, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index ``0..n-1`` cut in blocks of ``ceil(n/a)`` and of ``ceil(n/b)``: (block in the
    first cut, block in the second, length) of every non-empty piece where they overlap."""
    wa, wb = -(-n // a), -(-n // b)
    cuts = np.unique(np.r_[np.arange(0, n, wa), np.arange(0, n, wb), n])
    lo, ln = cuts[:-1], np.diff(cuts)
    return lo // wa, lo // wb, ln


def _run(arch: ArchSpec, name: str, specs, grid, defects: str, useful_macs: int = 0,
         same_as: tuple | None = None):
    """Cost ``specs`` on ``grid``; ``same_as = ("rows" | "cols", physical indices)``: the
    messages are one representative row (column) of a pattern every listed row (column)
    repeats, recorded in ``notes["same_as"]`` for maps of the whole mesh."""
    specs, _ = reroute(specs, arch.mesh, defects)
    mask = grid.mask()
    return simulate(arch, to_phases(specs, arch.mesh.link_bytes_per_cycle), op=name,
                    algo="model", shape={}, cores=mask, memory_bytes=np.zeros(mask.shape),
                    useful_macs=useful_macs,
                    notes={"same_as": (same_as[0], [int(x) for x in same_as[1]])}
                    if same_as else None)


def handover(arch: ArchSpec, cfg: LlamaConfig, *, tokens: int, layers: int, elem_bytes: int,
             defects: str = "skip", embedding: bool = True, head: bool = True) -> MeshReport:
    """Decode after prefill: every weight matrix of ``layers`` layers (the weight ops of
    :func:`decoder_layer_ops`), the prompt's KV cache (``[tokens, 2 kvd]`` per layer) and the
    embedding table / LM head move from the prefill layout (square ``p x p`` grid, blocks of
    ``ceil(n/p)`` columns) to the decode layout (whole ``pr x pc`` grid, ``ceil(n/pc)``), as
    mesh messages.

    Both grids must share their rows (the WSE-2 case: 750 of 750; otherwise refused): a block
    keeps its row and moves east along it from logical column ``j`` to ``j' >= j``. The move is
    a store-and-forward relay along each row (one hop per step, one route id per hop): at step
    ``s`` the link east of column ``c`` carries every chunk that started at ``c - s + 1`` and
    goes beyond ``c``. Rows are independent and all move the same pattern; the first block row
    (the fullest) is costed.
    """
    src = defect_grid(arch.mesh, defects, square=True)
    dst = defect_grid(arch.mesh, defects)
    if src.pr != dst.pr or not np.array_equal(src.rows, dst.rows) or \
            not np.array_equal(src.cols, dst.cols[:src.pc]):
        raise MeshMappingError(
            f"--all decode: the prefill grid {src.pr}x{src.pc} and the decode grid "
            f"{dst.pr}x{dst.pc} use different rows; the prefill-to-decode handover is modelled "
            "only when they share their rows (a mesh at least as wide as it is tall)")
    eb = elem_bytes
    kvd = cfg.n_kv_heads * cfg.head_dim
    mats = [(o.k, o.n, layers) for o in decoder_layer_ops(cfg, "decode", tokens=1, context=1,
                                                          pr=dst.pr, pc=dst.pc) if o.weight]
    mats.append((tokens, 2 * kvd, layers))
    if embedding:
        mats.append((cfg.vocab_size, cfg.d_model, 1))
    if head:
        mats.append((cfg.d_model, cfg.vocab_size, 1))
    moved = np.zeros((src.pc, dst.pc), np.int64)          # bytes from column j to column j'
    for r, c, n in mats:
        row0 = min(-(-r // dst.pr), r)                      # rows of the first block row
        ci, cj, cl = _overlaps(c, src.pc, dst.pc)
        np.add.at(moved, (ci, cj), row0 * cl * eb * n)
    j, jd = np.nonzero(moved)
    nb = moved[j, jd]
    go = jd > j
    j, jd, nb = j[go], jd[go], nb[go]
    specs = []
    for step in range(1, int((jd - j).max(initial=0)) + 1):
        on = jd - j >= step
        at = j[on] + step - 1                               # the boundary east of column at
        load = np.bincount(at, weights=nb[on], minlength=dst.pc).astype(np.int64)
        c = np.flatnonzero(load)
        specs.append(PhaseSpec(f"re-layout relay step {step}", FlowBatch.make(
            dst.rows[0], dst.cols[c], dst.rows[0], dst.cols[c + 1], load[c])))
    return _run(arch, "handover", specs, dst, defects, same_as=("rows", dst.rows))


def embedding_lookup(arch: ArchSpec, cfg: LlamaConfig, phase: str, *, tokens: int,
                     elem_bytes: int, defects: str = "skip") -> MeshReport:
    """Token embeddings from the table (``[vocab, d]``: vocabulary on the rows, d on the columns
    of the phase's grid) to the activations' layout, as mesh messages along the columns.

    decode: the token's table row multicasts its ``ceil(d/pc)`` values up and down every column
    (the layer's input is replicated on every row); costed for a token on the grid's first row,
    the farthest case. prefill: token ids are unknown, so every token's table row is taken at the
    mean distance of two uniformly random rows of ``p``, ``h = round((p*p - 1) / (3p))`` rows
    away (down for rows that can, else up); each row's ``ceil(tokens/p)`` segments of
    ``ceil(d/p)`` values travel the ``h`` hops one hop at a time (store and forward, like the
    MoE relay: one route id per hop). Every column moves the same pattern: the first column's
    messages are costed.
    """
    eb = elem_bytes
    if phase == "decode":
        grid = defect_grid(arch.mesh, defects)
        spec = PhaseSpec("embedding row multicast along columns",
                         bcast_col_flows(0, grid.rows, grid.cols, -(-cfg.d_model // grid.pc) * eb))
        return _run(arch, "embedding", [spec], grid, defects)
    grid = defect_grid(arch.mesh, defects, square=True)
    p = grid.pr
    h = round((p * p - 1) / (3 * p))
    if h == 0:
        return _run(arch, "embedding", [], grid, defects)
    i = np.arange(p)
    down = i + h < p
    nxt = np.where(down, i + 1, i - 1)
    flows = FlowBatch.make(grid.rows[i], grid.cols[0], grid.rows[nxt], grid.cols[0],
                           -(-tokens // p) * -(-cfg.d_model // p) * eb)
    return _run(arch, "embedding", [PhaseSpec(f"embedding segments {h} hops along columns, "
                                              "one hop per step (one column)", flows,
                                              repeat=h)], grid, defects,
                same_as=("cols", grid.cols))


def final_norm_and_head(arch: ArchSpec, cfg: LlamaConfig, phase: str, *, elem_bytes: int,
                        defects: str = "skip") -> list[tuple[str, MeshReport]]:
    """The last token's final RMSNorm (``ceil(d/pc)`` values x 4 ops per core + a row
    all-reduce of one value) and LM head (MeshGEMV ``[1, d] x [d, vocab]``) on the phase's grid
    (prefill: the square grid; only the last token's logits are needed)."""
    eb = elem_bytes
    grid = defect_grid(arch.mesh, defects, square=phase == "prefill")
    dt = -(-cfg.d_model // grid.pc)
    specs = [PhaseSpec(f"{dt} elem/core x 4 ops", vector_ops=dt * 4)] + \
        row_allreduce_specs(grid, eb)
    norm = _run(arch, "final norm", specs, grid, defects)
    head = mesh_gemv(arch, cfg.d_model, cfg.vocab_size, elem_bytes=eb, pr=grid.pr, pc=grid.pc,
                     defects=defects)
    return [("final norm (RMSNorm)", norm), ("lm head", head)]
