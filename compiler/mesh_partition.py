"""Transformer layers partitioned over a wafer-scale mesh, emitted as a Program of mesh tasks.

:func:`partition_layer` emits one Llama-style decoder layer (prefill or decode) exactly as
:func:`tilewright.dataflow_sim.mesh.llm.plan_layer` describes it (placement, vector work, shift-
based KV cache: see that module's docstring); every op becomes consecutive
:class:`~tilewright.compiler.program.MeshPhaseTask` s with ``op`` = the op's name.
:func:`partition_moe_layer` places a MoE layer's experts on disjoint regions of the mesh, with
dispatch and combine as mesh messages.

Message geometry is stored once per distinct flow set (int32 constants shared between tasks, so a
WSE-2 prefill Program holds a few arrays, not one per GEMM); bytes per message are run-length
coded on the task. Costing: :func:`tilewright.dataflow_sim.mesh.run_mesh_program`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.mesh_schedule import (FlowBatch, Grid, MeshScheduleError, PhaseSpec,
                                               bcast_col_flows, gemm_phase_specs,
                                               gemv_phase_specs, healthy_grid, kv_shift_specs,
                                               route_around_specs, routearound_grid,
                                               row_allreduce_specs)
from tilewright.compiler.program import MeshPhaseTask, Program, TensorInfo
from tilewright.models.llm_shapes import LlamaConfig, MoEConfig, get_config

__all__ = ["MeshProgramBuilder", "partition_layer", "layer_macs", "llama_config", "DecoderOp",
           "decoder_layer_ops", "causal_block_macs", "prefill_gemm_specs",
           "partition_moe_layer", "moe_layer_macs", "moe_config", "square_regions",
           "rect_regions", "DEFECT_POLICIES", "MAX_RELAY_MESSAGES"]

#: ``skip``: drop every row/column with a defect; ``route``: drop only dead cores' columns and
#: reroute messages around defects (:func:`~tilewright.compiler.mesh_schedule.route_around`)
DEFECT_POLICIES = ("skip", "route")

#: largest number of first-hop messages a MoE prefill dispatch + combine may list (memory bound:
#: ~60 B each while building; Mixtral on WSE-2 lists ~14 M)
MAX_RELAY_MESSAGES = 20_000_000


class MeshProgramBuilder:
    """Collects mesh tasks and their (deduplicated) constant tensors into a Program; under
    the ``route`` defect policy it reroutes every phase's messages around defects."""

    def __init__(self, name: str, arch: ArchSpec, defects: str = "skip"):
        if arch.mesh is None:
            raise MeshScheduleError(f"{arch.name}: the ArchSpec has no mesh section")
        if defects not in DEFECT_POLICIES:
            raise MeshScheduleError(f"defects {defects!r}: must be one of "
                                    f"{', '.join(DEFECT_POLICIES)}")
        self.name, self.arch, self.defects = name, arch, defects
        self.detour_extra_hops = 0
        self.tasks: list[MeshPhaseTask] = []
        self.constants: dict[str, np.ndarray] = {}
        self.tensors: dict[str, TensorInfo] = {}
        self._by_hash: dict[str, str] = {}

    def _const(self, prefix: str, arr: np.ndarray, fmt: str) -> str:
        key = hashlib.sha1(arr.tobytes() + str(arr.shape).encode()).hexdigest()
        name = self._by_hash.get(prefix + key)
        if name is None:
            name = f"{prefix}{sum(k.startswith(prefix) for k in self.constants)}"
            self.constants[name] = arr
            self.tensors[name] = TensorInfo(name=name, shape=tuple(arr.shape), format=fmt)
            self._by_hash[prefix + key] = name
        return name

    def cores(self, mask: np.ndarray) -> str:
        """Name of the bool [rows, cols] constant holding ``mask``."""
        return self._const("cores", np.ascontiguousarray(mask, dtype=np.bool_), "bool")

    def add(self, op: str, specs: list[PhaseSpec], cores: np.ndarray | list[np.ndarray], *,
            memory_bytes_per_core: int = 0, useful_macs: int = 0, source: str = "") -> None:
        """Append one task per phase spec of ``op``. ``cores``: the op's core mask, or one mask
        per spec; ``useful_macs`` is spread over the phases in proportion to their MACs."""
        masks = cores if isinstance(cores, list) else [cores] * len(specs)
        if self.defects == "route":
            specs_masks = []
            for s, m in zip(specs, masks):
                routed, extra = route_around_specs([s], self.arch.mesh)
                self.detour_extra_hops += extra * s.repeat
                specs_masks += [(r, m) for r in routed]
            specs, masks = [x for x, _ in specs_masks], [m for _, m in specs_masks]
        work = [s.macs * s.repeat for s in specs]
        total = sum(work)
        left = useful_macs
        for i, (s, mask) in enumerate(zip(specs, masks)):
            share = 0
            if total:
                share = left if i == max(j for j, w in enumerate(work) if w) else \
                    useful_macs * work[i] // total
            left -= share
            fields = {}
            if s.flows is not None and len(s.flows):
                fields = self._flow_fields(s.flows)
            deps = (self.tasks[-1].name,) if self.tasks else ()
            self.tasks.append(MeshPhaseTask(
                name=f"{op} #{i} {s.name}", op=op, cores=self.cores(mask),
                macs_per_core=int(s.macs), vector_ops_per_core=int(s.vector_ops),
                overlap=s.overlap, repeat=int(s.repeat), route_group=s.route_group,
                memory_bytes_per_core=int(memory_bytes_per_core), useful_macs=int(share),
                deps=deps, source=source or op, **fields))

    def _flow_fields(self, f: FlowBatch) -> dict:
        geo = np.stack([f.sr, f.sc, f.dr, f.dc, f.stages, f.times], axis=1).astype(np.int32)
        cut = np.flatnonzero(np.diff(f.nbytes)) + 1
        starts = np.r_[0, cut]
        counts = np.diff(np.r_[starts, len(f)])
        return {"flows": self._const("flows", geo, "int32"),
                "flow_bytes": tuple(int(b) for b in f.nbytes[starts]),
                "flow_counts": tuple(int(c) for c in counts)}

    def grid(self, *, square: bool = False, pr: int | None = None,
             pc: int | None = None) -> Grid:
        """The logical grid of this builder's defect policy."""
        pick = healthy_grid if self.defects == "skip" else routearound_grid
        return pick(self.arch.mesh, square=square, pr=pr, pc=pc)

    def program(self, meta: dict | None = None) -> Program:
        meta = {**(meta or {}), "defects": self.defects}
        if self.defects == "route":
            meta["detour_extra_hops"] = self.detour_extra_hops
        prog = Program(name=self.name, arch_hash=self.arch.content_hash(), tensors=self.tensors,
                       inputs=[], outputs=[], tasks=self.tasks, meta=meta,
                       constants=self.constants)
        prog.check()
        return prog


def llama_config(model: str):
    """The :class:`~tilewright.models.llm_configs.LlamaConfig` called ``model``."""
    cfg = get_config(model)
    if not isinstance(cfg, LlamaConfig):
        raise MeshScheduleError(f"{model}: mesh layer partitioning covers Llama-style dense "
                                f"decoders; {type(cfg).__name__} is not supported (MoE layers: "
                                "partition_moe_layer)")
    return cfg


def layer_macs(model: str, phase: str, *, tokens: int = 4096, context: int = 4096) -> int:
    """Closed-form MACs of one decoder layer's GEMMs/GEMVs (heads concatenated, as mapped):
    prefill over ``tokens`` tokens (causal: QK^T and PV each over the ``s(s+1)/2`` unmasked
    query-key pairs), decode of one token over ``context`` cached tokens."""
    cfg = llama_config(model)
    d, kvd, ffn = cfg.d_model, cfg.n_kv_heads * cfg.head_dim, cfg.d_ffn
    s = tokens if phase == "prefill" else 1
    pairs = tokens * (tokens + 1) // 2 if phase == "prefill" else context
    return s * d * (d + 2 * kvd) + 2 * pairs * d + s * d * d + 3 * s * d * ffn


@dataclass(frozen=True)
class DecoderOp:
    """One op of a Llama decoder layer as the mesh runs it: ``kind`` ``gemm`` (``m x k x n``),
    ``gemv`` (``[1, k] x [k, n]``) or ``vector`` (``elems`` elements per core x ``ops_per``
    ops each, then ``reductions`` row all-reduces of ``red_values`` values per core).
    ``weight``: the right operand ``[k, n]`` is a weight matrix the cores keep (K on rows, N on
    columns); ``causal``: a prefill attention product under the causal mask
    (:func:`causal_block_macs`)."""

    name: str
    kind: str
    m: int = 1
    k: int = 0
    n: int = 0
    elems: int = 0
    ops_per: int = 0
    reductions: int = 0
    red_values: int = 0
    weight: bool = False
    causal: bool = False


def causal_block_macs(mt: int, kt: int, nt: int, t: int) -> int:
    """MACs per core per step of a causal attention MeshGEMM block ``mt x kt x nt`` whose two
    token axes have ``t`` tokens per core (QK^T: m and n; PV: m and k).

    Tokens are striped over the grid (token ``a*p + i`` on row/column ``i``; Striped Attention,
    Brandon et al. 2023): query ``a*p + i`` sees key ``b*p + j`` iff ``a > b`` or (``a == b`` and
    ``i >= j``), so a block on or below the diagonal holds ``t(t+1)/2`` unmasked pairs of its
    ``t*t`` and one above it ``t(t-1)/2`` — every core's work is balanced at most ``t(t+1)/2``.
    Returns ``mt*kt*nt / t * (t+1) / 2`` (exact: ``t(t+1)`` is even)."""
    return (mt * kt * nt // t) * (t + 1) // 2


def decoder_layer_ops(cfg: LlamaConfig, phase: str, *, tokens: int, context: int, pr: int,
                      pc: int) -> list[DecoderOp]:
    """The ops of one decoder layer of ``cfg`` in order, on a ``pr x pc`` grid of cores: prefill
    (``tokens`` at once; square grid, ``pr == pc``) or decode (one token over ``context`` cached
    tokens). The one list both the mesh Program (:func:`partition_layer`) and the mesh model's
    plan (:func:`tilewright.dataflow_sim.mesh.llm.plan_layer`) follow; decode's KV-cache shift
    comes after these ops."""
    d, kvd, ffn = cfg.d_model, cfg.n_kv_heads * cfg.head_dim, cfg.d_ffn
    wgemm = lambda name, m, k, n: DecoderOp(name, "gemm", m=m, k=k, n=n,      # noqa: E731
                                            weight=True)
    causal = lambda name, m, k, n: DecoderOp(name, "gemm", m=m, k=k, n=n,     # noqa: E731
                                             causal=True)
    gemv = lambda name, k, n: DecoderOp(name, "gemv", k=k, n=n)               # noqa: E731
    wgemv = lambda name, k, n: DecoderOp(name, "gemv", k=k, n=n, weight=True)  # noqa: E731
    vec = lambda name, elems, ops, red=0, vals=0: DecoderOp(                  # noqa: E731
        name, "vector", elems=elems, ops_per=ops, reductions=red, red_values=vals)
    if phase == "prefill":
        s, p = tokens, pr
        st, dt = -(-s // p), -(-d // p)
        return [
            vec("attn_norm (RMSNorm)", st * dt, 4, 1, st),
            wgemm("wq|wk|wv", s, d, d + 2 * kvd),
            vec("rope(q, k)", st * -(-(d + kvd) // p), 4),
            causal("q @ k^T (heads along K, causal)", s, d, s),
            vec("softmax", st * -(-s // p), 5, 2, st),
            causal("p @ v (heads along N, causal)", s, s, d),
            wgemm("wo", s, d, d),
            vec("residual + ffn_norm", st * dt, 5, 1, st),
            wgemm("w1", s, d, ffn),
            wgemm("w3", s, d, ffn),
            vec("silu(w1) * w3", st * -(-ffn // p), 5),
            wgemm("w2", s, ffn, d),
            vec("residual", st * dt, 1)]
    t = context
    dt = -(-d // pc)
    return [
        vec("attn_norm (RMSNorm)", dt, 4, 1, 1),
        wgemv("wq|wk|wv", d, d + 2 * kvd),
        vec("rope(q, k)", -(-(d + kvd) // pc), 4),
        gemv("q . K^T over context (heads along K)", d, t),
        vec("softmax over context", -(-t // pc), 5, 2, 1),
        gemv("p . V (heads along N)", t, d),
        wgemv("wo", d, d),
        vec("residual + ffn_norm", dt, 5, 1, 1),
        wgemv("w1|w3", d, 2 * ffn),
        vec("silu(w1) * w3", -(-ffn // pc), 5),
        wgemv("w2", ffn, d),
        vec("residual", dt, 1)]


def prefill_gemm_specs(algo: str, grid: Grid, mt: int, kt: int, nt: int, elem_bytes: int,
                       causal: bool = False) -> list[PhaseSpec]:
    """A prefill GEMM's phases on the square ``grid``; ``causal``: an attention product whose
    token axes (``mt`` tokens per core) are masked, each compute step doing
    :func:`causal_block_macs` instead of ``mt*kt*nt`` MACs per core (messages unchanged)."""
    specs = gemm_phase_specs(algo, grid, mt, kt, nt, elem_bytes=elem_bytes)
    if causal:
        for s in specs:
            if s.macs:
                s.macs = causal_block_macs(mt, kt, nt, mt)
    return specs


def _vector(b: MeshProgramBuilder, name: str, elems: int, ops_per: int, mask: np.ndarray,
            reductions: int, red_grid: Grid, red_bytes: int) -> None:
    """A per-core vector op plus ``reductions`` row all-reduces of ``red_bytes`` each."""
    specs = [PhaseSpec(f"{elems} elem/core x {ops_per} ops", vector_ops=elems * ops_per)]
    masks = [mask]
    if reductions:
        red = row_allreduce_specs(red_grid, red_bytes)
        for s in red:
            s.repeat *= reductions
        specs += red
        masks += [red_grid.mask()] * len(red)
    b.add(name, specs, masks)


def partition_layer(arch: ArchSpec, model: str = "llama3-8b", phase: str = "prefill", *,
                    tokens: int = 4096, context: int = 4096, algo: str | None = None,
                    elem_bytes: int = 2, defects: str = "skip") -> Program:
    """One decoder layer of ``model`` on ``arch.mesh`` as a Program of mesh tasks.

    prefill: ``tokens`` prompt tokens at once, every GEMM a MeshGEMM (``algo`` = mesh | cannon |
    summa) on the square healthy grid; decode: one new token attending to ``context`` cached
    tokens, every projection a MeshGEMV (``algo`` = mesh | allreduce) on the whole healthy
    grid, then the shift-based KV cache's one-hop shift. ``elem_bytes``: bytes per element of
    weights and activations (fp16: 2). Each task declares its op's working set
    (``memory_bytes_per_core``); whether the whole model fits the wafer is checked by the
    caller (:mod:`tilewright.dataflow_sim.mesh.capacity`, before timing).
    """
    if phase not in ("prefill", "decode"):
        raise MeshScheduleError(f"phase {phase!r}: must be 'prefill' or 'decode'")
    if tokens < 1 or context < 1:
        raise MeshScheduleError(f"tokens = {tokens}, context = {context}: must be >= 1")
    cfg = llama_config(model)
    b = MeshProgramBuilder(f"{model}-{phase}-layer", arch, defects)
    kvd = cfg.n_kv_heads * cfg.head_dim
    eb = elem_bytes
    if phase == "prefill":
        algo = algo or "mesh"
        grid = b.grid(square=True)
        p = grid.pr
        mask = grid.mask()
        red_grid = b.grid(pc=p)
        nbuf = 3 if algo == "summa" else 2

        def gemm(name: str, m: int, k: int, n: int, causal: bool) -> None:
            mt, kt, nt = -(-m // p), -(-k // p), -(-n // p)
            mem = nbuf * (mt * kt + kt * nt) * eb + mt * nt * eb
            b.add(name, prefill_gemm_specs(algo, grid, mt, kt, nt, eb, causal), mask,
                  memory_bytes_per_core=mem,
                  useful_macs=m * k * n // tokens * (tokens + 1) // 2 if causal else m * k * n)

        def vec(name: str, elems: int, ops_per: int, reductions: int = 0,
                red_values: int = 0) -> None:
            _vector(b, name, elems, ops_per, mask, reductions, red_grid, red_values * eb)

        for op in decoder_layer_ops(cfg, phase, tokens=tokens, context=context, pr=p, pc=p):
            if op.kind == "gemm":
                gemm(op.name, op.m, op.k, op.n, op.causal)
            else:
                vec(op.name, op.elems, op.ops_per, op.reductions, op.red_values)
        meta = {"grid": f"{p}x{p}", "algo": algo}
    else:
        algo = algo or "mesh"
        grid = b.grid()
        pr, pc = grid.pr, grid.pc
        mask = grid.mask()

        def gemv(name: str, k: int, n: int) -> None:
            kt, nt = -(-k // pr), -(-n // pc)
            mem = kt * nt * eb + kt * eb + 2 * nt * eb
            b.add(name, gemv_phase_specs(algo, grid, kt, nt, elem_bytes=eb, acc_bytes=eb), mask,
                  memory_bytes_per_core=mem, useful_macs=k * n)

        def vec(name: str, elems: int, ops_per: int, reductions: int = 0,
                red_values: int = 0) -> None:
            _vector(b, name, elems, ops_per, mask, reductions, grid, red_values * eb)

        for op in decoder_layer_ops(cfg, phase, tokens=tokens, context=context, pr=pr, pc=pc):
            if op.kind == "gemv":
                gemv(op.name, op.k, op.n)
            else:
                vec(op.name, op.elems, op.ops_per, op.reductions, op.red_values)
        b.add("kv-cache shift", kv_shift_specs(grid, -(-2 * kvd // pc) * eb), mask)
        meta = {"grid": f"{pr}x{pc}", "algo": algo}
    return b.program({"model": model, "phase": phase, "tokens": tokens if phase == "prefill"
                      else 1, "context": context, **meta})


# ---- MoE layers ------------------------------------------------------------------------------

def moe_config(model):
    """The :class:`~tilewright.models.llm_configs.MoEConfig` called ``model`` (or ``model``
    itself when it already is one)."""
    cfg = get_config(model) if isinstance(model, str) else model
    if not isinstance(cfg, MoEConfig):
        raise MeshScheduleError(f"{getattr(cfg, 'name', cfg)}: MoE partitioning needs an MoE "
                                f"config; {type(cfg).__name__} is not one")
    return cfg


def moe_layer_macs(model, phase: str, *, tokens: int = 4096,
                   token_experts: list[list[int]] | None = None) -> int:
    """Closed-form MACs of one MoE layer: router ``T*d*E``, routed experts ``T*k*3*d*F``
    (SwiGLU: w1, w3 and w2), shared experts ``T*3*d*(n_shared*F)``; ``T`` = ``tokens``
    (prefill) or the decode batch (``len(token_experts)``, default 1)."""
    cfg = moe_config(model)
    t = tokens if phase == "prefill" else len(token_experts or [[0]])
    d, e, k, f = cfg.d_model, cfg.n_experts, cfg.top_k, cfg.d_expert_ffn
    return t * d * e + 3 * t * k * d * f + 3 * t * d * cfg.n_shared_experts * f


def square_regions(grid: Grid, n: int) -> tuple[Grid, int, int, list[Grid]]:
    """Cut the square ``grid`` into ``g x g`` square tiles of side ``q`` (``g = ceil(sqrt n)``),
    tile ``(a, b)`` = region ``a*g + b``; returns (the ``gq x gq`` sub-grid they cover, g, q,
    the first ``n`` regions)."""
    g = int(np.ceil(np.sqrt(n)))
    q = grid.pr // g
    if q < 1:
        raise MeshScheduleError(f"{n} expert regions need at least {g}x{g} cores; the grid is "
                                f"{grid.pr}x{grid.pc}")
    sub = grid.sub(0, g * q, 0, g * q)
    regions = [sub.sub(a * q, (a + 1) * q, b * q, (b + 1) * q) for a in range(g)
               for b in range(g)]
    return sub, g, q, regions[:n]


def rect_regions(grid: Grid, n: int) -> list[Grid]:
    """Cut ``grid`` into a ``gy x gx`` tiling (``gy*gx >= n``) whose tiles hold the most cores
    (ties: the squarer tile); the first ``n`` tiles, row-major."""
    best = None
    for gy in range(1, n + 1):
        gx = -(-n // gy)
        qr, qc = grid.pr // gy, grid.pc // gx
        if qr < 1 or qc < 1:
            continue
        key = (qr * qc, -abs(qr - qc))
        if best is None or key > best[0]:
            best = (key, gy, gx, qr, qc)
    if best is None:
        raise MeshScheduleError(f"{n} expert regions do not fit the {grid.pr}x{grid.pc} grid")
    _, gy, gx, qr, qc = best
    return [grid.sub(a * qr, (a + 1) * qr, b * qc, (b + 1) * qc) for a in range(gy)
            for b in range(gx)][:n]


def _merge(per_region: list[list[PhaseSpec]]) -> list[PhaseSpec]:
    """Regions running the same schedule at once: one phase per step, messages of every region,
    the busiest region's work per core."""
    out = []
    for step in zip(*per_region):
        out.append(PhaseSpec(step[0].name, FlowBatch.concat([s.flows for s in step]),
                             max(s.macs for s in step), step[0].overlap, step[0].repeat, None,
                             max(s.vector_ops for s in step)))
    return out


def _relay_specs(sub: Grid, g: int, q: int, moves: dict[tuple[int, int], int],
                 name: str, reverse: bool = False) -> list[PhaseSpec]:
    """Tile-to-tile all-to-all by store-and-forward relay (see :func:`partition_moe_layer`).

    ``moves[(src tile, dst tile)]`` = bytes every core of the source tile sends to the core at
    the same position of the destination tile. Per tile offset (da, db): a phase of one-hop
    messages along rows repeated ``|db|*q`` times, then along columns ``|da|*q`` times.
    """
    by_offset: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for (src, dst), nb in moves.items():
        if nb > 0:
            by_offset.setdefault((dst // g - src // g, dst % g - src % g), []).append((src, nb))
    specs = []
    idx = np.arange(q)
    for (da, db), pairs in sorted(by_offset.items()):
        src = np.array([p[0] for p in pairs], np.int64)
        nb = np.array([p[1] for p in pairs], np.int64)[:, None, None]
        tile_a, tile_b = src // g, src % g                  # where each chunk starts
        legs = [("row", db), ("col", da)]
        if reverse:
            legs.reverse()
        for axis, off in legs:
            if off == 0:
                continue
            step = int(np.sign(off))
            ii = np.broadcast_to((tile_a * q)[:, None, None] + idx[None, :, None],
                                 (src.size, q, q))
            jj = np.broadcast_to((tile_b * q)[:, None, None] + idx[None, None, :],
                                 (src.size, q, q))
            ti, tj = (ii, jj + step) if axis == "row" else (ii + step, jj)
            specs.append(PhaseSpec(f"{name} tiles ({da:+d}, {db:+d}) along {axis}s",
                                   FlowBatch.make(sub.rows[ii], sub.cols[jj], sub.rows[ti],
                                                  sub.cols[tj], nb),
                                   repeat=abs(off) * q))
            if axis == "row":
                tile_b = tile_b + db
            else:
                tile_a = tile_a + da
    return specs


def _uniform_counts(total: int, n: int) -> list[int]:
    base, extra = divmod(total, n)
    return [base + (i < extra) for i in range(n)]


def partition_moe_layer(arch: ArchSpec, model="mixtral-8x7b", phase: str = "prefill", *,
                        tokens: int = 4096, expert_tokens: list[int] | None = None,
                        token_experts: list[list[int]] | None = None, algo: str | None = None,
                        elem_bytes: int = 2, defects: str = "skip") -> Program:
    """One MoE layer (router, top-k routed SwiGLU experts, shared experts) of ``model`` on
    ``arch.mesh`` as a Program of mesh tasks. Every expert (and the shared experts, as one
    more) owns a disjoint region of the mesh and keeps its weights there.

    **prefill** — ``tokens`` tokens; X [T, d] sits on a ``gq x gq`` square grid (tokens on rows,
    features on columns) cut into ``g x g`` square tiles of side q, one per expert. Router:
    MeshGEMM ``[T, d] x [d, E]`` + softmax/top-k (vector work, 2 row all-reduces). Dispatch:
    every core sends, to every expert tile, its tokens' rows routed to that expert (``ceil(n_e
    / gq)`` tokens x its feature block) at the same position of the tile (all tokens to the
    shared tile); the all-to-all runs tile offset by tile offset as store-and-forward relays of
    one-hop messages (each core forwards one chunk per hop; uncontended:
    ``(|da| + |db|) * q * (alpha + beta + W)`` per offset). Experts: MeshGEMMs ``w1``, ``w3``
    ([n_e, d] x [d, F]), SwiGLU, ``w2`` on each tile at once (the feature blocks a tile core
    receives are a fixed permutation of the contraction axis). Combine: the reverse relay,
    then the gate-weighted sum. ``expert_tokens``: tokens per expert (default: uniform,
    ``T * k`` in all).

    **decode** — a batch of tokens (``token_experts[t]`` = the experts token t is routed to;
    default one token, experts ``0..k-1``) on the whole healthy grid, cut into rectangular
    regions. Router: GEMV + softmax/top-k. Dispatch: x is column-split on every row (the dense
    decode layout); each region row gets its K segment from the cores of the *same* physical
    row holding it (one message per overlapping column block, batching the region's tokens)
    at the region's middle column. Experts: MeshGEMVs ``w1|w3`` and ``w2`` in every active
    region at once. Combine: per column block j, region row ``j mod qr`` sends the block to the
    grid's middle row, which adds the gated partials and multicasts y up and down the column.

    Approximation (stated): a relay phase lists each chunk's first hop; its time is exact
    (every hop of a translation is the same uncontended one-hop pattern) but link-load totals
    put the whole relay on the first hop's links.
    """
    if phase not in ("prefill", "decode"):
        raise MeshScheduleError(f"phase {phase!r}: must be 'prefill' or 'decode'")
    cfg = moe_config(model)
    name = getattr(cfg, "name", "moe")
    d, n_exp, k, ffn = cfg.d_model, cfg.n_experts, cfg.top_k, cfg.d_expert_ffn
    f_sh = cfg.n_shared_experts * ffn
    eb = elem_bytes
    n_reg = n_exp + (1 if f_sh else 0)
    b = MeshProgramBuilder(f"{name}-moe-{phase}", arch, defects)
    if phase == "prefill":
        algo = algo or "mesh"
        if tokens < 1:
            raise MeshScheduleError(f"tokens = {tokens}: must be >= 1")
        counts = list(expert_tokens) if expert_tokens is not None else \
            _uniform_counts(tokens * k, n_exp)
        if len(counts) != n_exp or sum(counts) != tokens * k or min(counts) < 0:
            raise MeshScheduleError(f"expert_tokens: need {n_exp} counts >= 0 summing to "
                                    f"tokens x top_k = {tokens * k}; got {counts}")
        sub, g, q, regions = square_regions(b.grid(square=True), n_reg)
        pm = sub.pr
        mask = sub.mask()
        st, dt = -(-tokens // pm), -(-d // pm)
        nbuf = 3 if algo == "summa" else 2

        def gemm_mem(mt, kt, nt):
            return nbuf * (mt * kt + kt * nt) * eb + mt * nt * eb

        mt, kt, nt = -(-tokens // pm), dt, -(-n_exp // pm)
        b.add("router", gemm_phase_specs(algo, sub, mt, kt, nt, elem_bytes=eb), mask,
              memory_bytes_per_core=gemm_mem(mt, kt, nt), useful_macs=tokens * d * n_exp)
        _vector(b, "router softmax + top-k", st * -(-n_exp // pm), 5, mask, 2, sub, st * eb)
        rows = [(e, counts[e]) for e in range(n_exp)] + ([(n_exp, tokens)] if f_sh else [])
        moves = {(s, e): (-(-n // pm)) * dt * eb for s in range(g * g) for e, n in rows
                 if s != e}
        legs = sum((s // g != e // g) + (s % g != e % g) for (s, e), nb in moves.items() if nb)
        if 2 * legs * q * q > MAX_RELAY_MESSAGES:
            raise MeshScheduleError(
                f"{name} prefill: the tile-by-tile relay all-to-all of {n_reg} expert regions "
                f"({g}x{g} tiles of {q}x{q} cores) lists {2 * legs * q * q:,} messages, more "
                f"than MAX_RELAY_MESSAGES = {MAX_RELAY_MESSAGES:,}; use fewer experts or a "
                "smaller mesh")
        b.add("dispatch", _relay_specs(sub, g, q, moves, "dispatch"), mask)
        widths = [(e, n, ffn) for e, n in rows[:n_exp]] + ([(n_exp, tokens, f_sh)] if f_sh
                                                           else [])
        active = [(regions[e], n, w) for e, n, w in widths if n > 0]
        act_mask = np.any([r.mask() for r, _, _ in active], axis=0)

        def experts(op: str, kdim, ndim_of) -> None:
            per, mem, useful = [], 0, 0
            for reg, n, w in active:
                kk, nn = kdim(w), ndim_of(w)
                m_t, k_t, n_t = -(-n // q), -(-kk // q), -(-nn // q)
                per.append(gemm_phase_specs(algo, reg, m_t, k_t, n_t, elem_bytes=eb))
                mem = max(mem, gemm_mem(m_t, k_t, n_t))
                useful += n * kk * nn
            b.add(op, _merge(per), act_mask, memory_bytes_per_core=mem, useful_macs=useful)

        experts("experts w1", lambda w: d, lambda w: w)
        experts("experts w3", lambda w: d, lambda w: w)
        _vector(b, "experts silu(w1) * w3", max(-(-n // q) * -(-w // q) for _, n, w in active),
                5, act_mask, 0, sub, 0)
        experts("experts w2", lambda w: w, lambda w: d)
        back = {(e, s): nb for (s, e), nb in moves.items()}
        b.add("combine", _relay_specs(sub, g, q, back, "combine", reverse=True), mask)
        _vector(b, "gated sum + residual", st * dt, 2 * k + 1 + (1 if f_sh else 0), mask, 0,
                sub, 0)
        meta = {"grid": f"{pm}x{pm}", "tiles": f"{g}x{g} of {q}x{q}", "algo": algo,
                "expert_tokens": counts}
    else:
        algo = algo or "mesh"
        toks = token_experts if token_experts is not None else [list(range(k))]
        if not toks or any(len(set(t)) != len(t) or not 1 <= len(t) <= n_exp or
                           any(not 0 <= e < n_exp for e in t) for t in toks):
            raise MeshScheduleError(f"token_experts: need, per token, distinct expert ids in "
                                    f"0..{n_exp - 1} (at most {n_exp}); got {toks}")
        grid = b.grid()
        pr, pc = grid.pr, grid.pc
        mask = grid.mask()
        regions = rect_regions(grid, n_reg)
        bt = len(toks)
        load = [sum(e in t for t in toks) for e in range(n_exp)] + ([bt] if f_sh else [])
        widths = [ffn] * n_exp + ([f_sh] if f_sh else [])
        active = [(regions[e], load[e], widths[e]) for e in range(n_reg) if load[e] > 0]
        act_mask = np.any([r.mask() for r, _, _ in active], axis=0)
        dt = -(-d // pc)
        kt, nt = -(-d // pr), -(-n_exp // pc)
        spec = gemv_phase_specs(algo, grid, kt, nt, elem_bytes=eb * bt, acc_bytes=eb * bt)
        for s in spec:
            s.macs *= bt
        b.add("router", spec, mask, memory_bytes_per_core=kt * nt * eb + (kt + 2 * nt) * eb * bt,
              useful_macs=bt * d * n_exp)
        _vector(b, "router softmax + top-k", bt * -(-n_exp // pc), 5, mask, 2, grid, bt * eb)
        b.add("dispatch", [PhaseSpec("x segments to expert regions",
                                     _decode_dispatch(grid, active, d, dt, eb))], mask)

        def experts(op: str, kdim, ndim_of) -> None:
            per, mem, useful = [], 0, 0
            for reg, n, w in active:
                kk, nn = kdim(w), ndim_of(w)
                k_t, n_t = -(-kk // reg.pr), -(-nn // reg.pc)
                sp = gemv_phase_specs(algo, reg, k_t, n_t, elem_bytes=eb * n, acc_bytes=eb * n)
                for s in sp:
                    s.macs *= n
                per.append(sp)
                mem = max(mem, k_t * n_t * eb + (k_t + 2 * n_t) * eb * n)
                useful += n * kk * nn
            b.add(op, _merge(per), act_mask, memory_bytes_per_core=mem, useful_macs=useful)

        experts("experts w1|w3", lambda w: d, lambda w: 2 * w)
        _vector(b, "experts silu(w1) * w3",
                max(n * -(-w // reg.pc) for reg, n, w in active), 5, act_mask, 0, grid, 0)
        experts("experts w2", lambda w: w, lambda w: d)
        home = pr // 2
        b.add("combine", [
            PhaseSpec("expert outputs to the middle row",
                      _decode_combine(grid, active, home, d, dt, eb)),
            PhaseSpec("gated sum", vector_ops=2 * bt * dt * (k + (1 if f_sh else 0))),
            PhaseSpec("broadcast y along columns",
                      _bcast_col(grid, home, bt * dt * eb))], mask)
        meta = {"grid": f"{pr}x{pc}", "regions": f"{regions[0].pr}x{regions[0].pc}",
                "algo": algo, "token_experts": toks}
    return b.program({"model": name, "phase": phase, "layer": "moe", **meta})


def _bcast_col(grid: Grid, root: int, nbytes: int) -> FlowBatch:
    return bcast_col_flows(root, grid.rows, grid.cols, nbytes)


def _segments(total: int, n: int) -> list[tuple[int, int]]:
    """``n`` consecutive index ranges of ``ceil(total/n)`` covering 0..total-1 (last short)."""
    w = -(-total // n)
    return [(i * w, min((i + 1) * w, total)) for i in range(n)]


def _decode_dispatch(grid: Grid, active, d: int, dt: int, eb: int) -> FlowBatch:
    """Per active region, per region row u: the column blocks of the global grid overlapping
    K segment u send their overlap (for the region's tokens) to the region's middle column,
    along the region row's own physical row."""
    parts = []
    blocks = np.array(_segments(d, grid.pc) if dt else [], np.int64).reshape(-1, 2)
    for reg, n, _ in active:
        mid = reg.cols[reg.pc // 2]
        for u, (lo, hi) in enumerate(_segments(d, reg.pr)):
            ov = np.minimum(blocks[:, 1], hi) - np.maximum(blocks[:, 0], lo)
            j = np.flatnonzero(ov > 0)
            parts.append(FlowBatch.make(reg.rows[u], grid.cols[j], reg.rows[u], mid,
                                        ov[j] * n * eb))
    return FlowBatch.concat(parts)


def _decode_combine(grid: Grid, active, home: int, d: int, dt: int, eb: int) -> FlowBatch:
    """Per active region, per global column block j: region row ``j mod qr`` sends the
    region's outputs of block j (from the region column holding them) to the grid's middle
    row at column j."""
    parts = []
    blocks = _segments(d, grid.pc)
    for reg, n, _ in active:
        ns = -(-d // reg.pc)
        j = np.array([i for i, (lo, hi) in enumerate(blocks) if hi > lo], np.int64)
        lo = np.array([blocks[i][0] for i in j], np.int64)
        width = np.array([blocks[i][1] - blocks[i][0] for i in j], np.int64)
        v = np.minimum(lo // ns, reg.pc - 1)
        u = j % reg.pr
        parts.append(FlowBatch.make(reg.rows[u], reg.cols[v], grid.rows[home], grid.cols[j],
                                    width * n * eb))
    return FlowBatch.concat(parts)
