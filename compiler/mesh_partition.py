"""Transformer layers partitioned over a wafer-scale mesh, emitted as a Program of mesh tasks.

:func:`partition_layer` emits one Llama-style decoder layer (prefill or decode) exactly as
:func:`tilewright.dataflow_sim.mesh.llm.plan_layer` describes it (placement, vector work, shift-
based KV cache: see that module's docstring); every op becomes consecutive
:class:`~tilewright.compiler.program.MeshPhaseTask` s with ``op`` = the op's name.
:func:`partition_moe_layer` emits a whole MoE decoder layer: the same attention and norm ops,
then the experts on disjoint regions of the mesh, with dispatch and combine as mesh messages
within ``max_routes_per_core`` (:mod:`tilewright.compiler.mesh_moe`).

Message geometry is stored once per distinct flow set (int32 constants shared between tasks, so a
WSE-2 prefill Program holds a few arrays, not one per GEMM); bytes per message are run-length
coded on the task. Costing: :func:`tilewright.dataflow_sim.mesh.run_mesh_program`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.mesh_moe import (check_routes, decode_combine_specs,
                                          decode_dispatch_specs, rect_tiling,
                                          relay_message_count, relay_specs,
                                          relay_stage_bytes)
from tilewright.compiler.mesh_schedule import (FlowBatch, Grid,
                                               MeshScheduleError, PhaseSpec,
                                               gemm_memory_bytes,
                                               gemm_phase_specs,
                                               gemv_phase_specs, healthy_grid,
                                               kv_shift_specs,
                                               route_around_specs,
                                               routearound_grid,
                                               row_allreduce_specs)
from tilewright.compiler.mesh_repair import repair
from tilewright.compiler.program import MeshPhaseTask, Program, TensorInfo
from tilewright.models.llm_shapes import LlamaConfig, MoEConfig, get_config

__all__ = ["MeshProgramBuilder", "partition_layer", "layer_macs", "llama_config", "DecoderOp",
           "decoder_layer_ops", "causal_block_macs", "prefill_gemm_specs",
           "partition_moe_layer", "moe_layer_macs", "moe_config", "moe_attention_config",
           "attention_ops", "square_regions",
           "rect_regions", "DEFECT_POLICIES", "MAX_RELAY_MESSAGES"]

#: ``skip``: drop every row/column with a defect; ``route``: drop only dead cores' columns and
#: reroute messages around defects (:func:`~tilewright.compiler.mesh_schedule.route_around`)
DEFECT_POLICIES = ("skip", "route")

#: largest number of first-hop messages a MoE prefill dispatch + combine may list (memory bound:
#: ~60 B each while building; Mixtral on WSE-2 lists 4.25 M, DeepSeek-V3's 257 regions 33.8 M)
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
                deps=deps, source=source or op, relay_wave=s.relay_wave, **fields))

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
        if self.arch.mesh.repairs_defects:      # the spares repair in hardware, not a policy
            meta.update(repair(self.arch.mesh).summary(), defects="spares")
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


def _emit_ops(b: MeshProgramBuilder, ops: list[DecoderOp], grid: Grid, red_grid: Grid,
              algo: str, eb: int) -> None:
    """Append ``ops`` (:func:`decoder_layer_ops`) to ``b``: a ``gemm`` as MeshGEMM ``algo`` on
    the square ``grid``, a ``gemv`` as MeshGEMV ``algo`` on ``grid``, a ``vector`` op on its
    cores with its row all-reduces on ``red_grid``; ``eb`` bytes per element."""
    mask = grid.mask()
    for op in ops:
        if op.kind == "gemm":
            p = grid.pr
            mt, kt, nt = -(-op.m // p), -(-op.k // p), -(-op.n // p)
            mem = gemm_memory_bytes(algo, mt, kt, nt, kt, elem_bytes=eb, acc_bytes=eb)
            macs = op.m * op.k * op.n     # causal: the unmasked s(s+1)/2 of s*s pairs (m = s)
            b.add(op.name, prefill_gemm_specs(algo, grid, mt, kt, nt, eb, op.causal), mask,
                  memory_bytes_per_core=mem,
                  useful_macs=macs // op.m * (op.m + 1) // 2 if op.causal else macs)
        elif op.kind == "gemv":
            kt, nt = -(-op.k // grid.pr), -(-op.n // grid.pc)
            mem = kt * nt * eb + kt * eb + 2 * nt * eb
            b.add(op.name, gemv_phase_specs(algo, grid, kt, nt, elem_bytes=eb, acc_bytes=eb),
                  mask, memory_bytes_per_core=mem, useful_macs=op.k * op.n)
        else:
            _vector(b, op.name, op.elems, op.ops_per, mask, op.reductions, red_grid,
                    op.red_values * eb)


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
        red_grid = b.grid(pc=p)
        _emit_ops(b, decoder_layer_ops(cfg, phase, tokens=tokens, context=context, pr=p, pc=p),
                  grid, red_grid, algo, eb)
        meta = {"grid": f"{p}x{p}", "algo": algo}
    else:
        algo = algo or "mesh"
        grid = b.grid()
        pr, pc = grid.pr, grid.pc
        _emit_ops(b, decoder_layer_ops(cfg, phase, tokens=tokens, context=context, pr=pr, pc=pc),
                  grid, grid, algo, eb)
        b.add("kv-cache shift", kv_shift_specs(grid, -(-2 * kvd // pc) * eb), grid.mask())
        meta = {"grid": f"{pr}x{pc}", "algo": algo}
    return b.program({"model": model, "phase": phase, "tokens": tokens if phase == "prefill"
                      else 1, "context": context, **meta})


# ---- MoE layers (dispatch / combine schedules: compiler/mesh_moe.py) -------------------------

def moe_config(model):
    """The :class:`~tilewright.models.llm_configs.MoEConfig` called ``model`` (or ``model``
    itself when it already is one)."""
    cfg = get_config(model) if isinstance(model, str) else model
    if not isinstance(cfg, MoEConfig):
        raise MeshScheduleError(f"{getattr(cfg, 'name', cfg)}: MoE partitioning needs an MoE "
                                f"config; {type(cfg).__name__} is not one")
    return cfg


def moe_attention_config(cfg: MoEConfig) -> LlamaConfig | None:
    """The Llama-style attention of ``cfg``'s decoder as a :class:`LlamaConfig` (its FFN
    fields unused), or None when ``cfg`` does not model its attention (``n_heads`` unset)."""
    if cfg.n_heads is None:
        return None
    return LlamaConfig(cfg.name, d_model=cfg.d_model, n_layers=cfg.n_layers,
                       n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads or cfg.n_heads,
                       d_ffn=cfg.d_expert_ffn, vocab_size=cfg.vocab_size or 0,
                       rope_theta=cfg.rope_theta, norm_eps=cfg.norm_eps,
                       max_seq_len=cfg.max_seq_len)


def attention_ops(cfg: LlamaConfig, phase: str, **kw) -> list[DecoderOp]:
    """The ops of :func:`decoder_layer_ops` before the FFN: norms, attention, residual."""
    ops = decoder_layer_ops(cfg, phase, **kw)
    return ops[:next(i for i, op in enumerate(ops) if op.name.startswith("w1"))]


def moe_layer_macs(model, phase: str, *, tokens: int = 4096,
                   token_experts: list[list[int]] | None = None, context: int = 4096) -> int:
    """Closed-form MACs of one MoE decoder layer: attention (when modeled) as
    :func:`layer_macs` counts it, ``T*d*(d + 2*kvd) + T*d*d`` projections plus ``2*T*t*d``
    over ``t`` keys, then router ``T*d*E``, routed experts ``T*k*3*d*F`` (SwiGLU: w1, w3 and
    w2), shared experts ``T*3*d*(n_shared*F)``; ``T`` = ``tokens`` (prefill, ``t = T``) or the
    decode batch (``len(token_experts)``, default 1; ``t`` = ``context``)."""
    cfg = moe_config(model)
    t = tokens if phase == "prefill" else len(token_experts or [[0]])
    d, e, k, f = cfg.d_model, cfg.n_experts, cfg.top_k, cfg.d_expert_ffn
    macs = t * d * e + 3 * t * k * d * f + 3 * t * d * cfg.n_shared_experts * f
    att = moe_attention_config(cfg)
    if att is not None:
        keys = t if phase == "prefill" else context
        kvd = att.n_kv_heads * att.head_dim
        macs += t * d * (d + 2 * kvd) + 2 * t * keys * d + t * d * d
    return macs


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
    """The first ``n`` tiles, row-major, of :func:`~tilewright.compiler.mesh_moe.rect_tiling`."""
    gy, gx, qr, qc = rect_tiling(grid, n)
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


def _uniform_counts(total: int, n: int) -> list[int]:
    base, extra = divmod(total, n)
    return [base + (i < extra) for i in range(n)]


def _expert_tiles(grid: Grid, rows: list[tuple[int, int, int]], d: int, eb: int, n_exp: int):
    """Prefill placement: the fewest experts per tile ``c`` (1, 2, ...) whose tiles fit the
    square ``grid`` and whose relay all-to-all lists at most :data:`MAX_RELAY_MESSAGES`
    messages. ``rows``: ``(expert, tokens, ffn width)``, the shared experts (id ``n_exp``) last;
    they get a tile of their own. Returns ``(c, groups of rows per tile, sub-grid, g, q, tile
    regions, relay stages {dispatch, combine}, messages listed)``."""
    routed, shared = rows[:n_exp], rows[n_exp:]
    for c in range(1, n_exp + 1):
        groups = [routed[i:i + c] for i in range(0, n_exp, c)] + [[r] for r in shared]
        try:
            sub, g, q, regions = square_regions(grid, len(groups))
        except MeshScheduleError:
            if c == n_exp:
                raise
            continue
        pm = sub.pr
        dt = -(-d // pm)
        per_tile = [sum(-(-n // pm) for _, n, _ in grp) * dt * eb for grp in groups]
        moves = {(s, t): nb for s in range(g * g) for t, nb in enumerate(per_tile) if s != t}
        stages = {"dispatch": relay_stage_bytes(g, moves, "row"),
                  "combine": relay_stage_bytes(g, {(t, s): nb for (s, t), nb in moves.items()},
                                               "col")}
        listed = sum(relay_message_count(g, q, st) for st in stages.values())
        if listed <= MAX_RELAY_MESSAGES:
            return c, groups, sub, g, q, regions, stages, listed
    raise MeshScheduleError(      # c = n_exp: one or two tiles, so the relay lists few messages
        f"MoE prefill relay lists {listed:,} messages even with every expert on one tile; "
        f"MAX_RELAY_MESSAGES = {MAX_RELAY_MESSAGES:,}")


def partition_moe_layer(arch: ArchSpec, model="mixtral-8x7b", phase: str = "prefill", *,
                        tokens: int = 4096, expert_tokens: list[int] | None = None,
                        token_experts: list[list[int]] | None = None, context: int | None = None,
                        algo: str | None = None, elem_bytes: int = 2,
                        defects: str = "skip") -> Program:
    """One MoE decoder layer of ``model`` on ``arch.mesh`` as a Program of mesh tasks: the
    attention block and its norms exactly as :func:`partition_layer` emits them (attn_norm,
    wq|wk|wv, rope, attention over the context, wo, residual + ffn_norm; decode: then the KV
    cache's shift), then the MoE block (router, top-k routed SwiGLU experts, shared experts,
    combine, residual). Every expert (and the shared experts, as one more) owns a disjoint
    region of the mesh and keeps its weights there. A config without modeled attention
    (``n_heads`` unset: DeepSeek-V3's MLA) gets the MoE block only, and says so in the
    Program's meta (``attention``); ``context`` is then refused. ``context``: decode's cached
    tokens per sequence (default 4096; prefill attends over its own ``tokens``).

    **prefill** — ``tokens`` tokens; X [T, d] sits on a ``gq x gq`` square grid (tokens on rows,
    features on columns) cut into ``g x g`` square tiles of side q, one per group of ``c``
    experts (the shared experts: a tile of their own; ``c`` = 1 unless the tiles would not fit
    the grid or the relay would list more than :data:`MAX_RELAY_MESSAGES` messages: then the
    fewest that do, e.g. 3 for DeepSeek-V3 on WSE-2; a tile runs its experts one after
    another, round r = every tile's r-th expert with tokens). Router:
    MeshGEMM ``[T, d] x [d, E]`` + softmax/top-k (vector work, 2 row all-reduces). Dispatch:
    every core sends, to every expert tile, its tokens' rows routed to that expert (``ceil(n_e
    / gq)`` tokens x its feature block) at the same position of the tile (all tokens to the
    shared tile); the all-to-all is a two-stage store-and-forward relay of one-hop messages
    (:func:`~tilewright.compiler.mesh_moe.relay_specs`): along rows to the destination tile
    column (the chunks for that column aggregated), then along columns to the destination tile
    row; per stage and tile offset o, the moves o tiles ahead and o tiles back run at once
    (opposite links), ``o * q * (alpha + beta + W)`` uncontended; 4 route ids per core at
    most (under a limit of 2 or 3, one direction per phase: 2). Attention and norms run on
    the same ``gq x gq`` grid. Experts: MeshGEMMs ``w1``, ``w3`` ([n_e, d] x [d, F]),
    SwiGLU, ``w2`` on each tile at once (the feature blocks a tile core receives are a fixed
    permutation of the contraction axis). Combine: the reverse relay (columns first), then the
    gate-weighted sum and residual. ``expert_tokens``: tokens per expert (default: uniform,
    ``T * k`` in all).

    **decode** — a batch of tokens (``token_experts[t]`` = the experts token t is routed to;
    default one token, experts ``0..k-1``) on the whole healthy grid, cut into rectangular
    regions (:func:`~tilewright.compiler.mesh_moe.rect_tiling`). Router: GEMV + softmax/top-k.
    Dispatch: x is column-split on every row (the dense decode layout); per row of a band with
    an active region, a gather chain collects the K segment that region row needs and row
    multicasts hand it to every active region head (middle column) of the band. Experts:
    MeshGEMVs ``w1|w3`` and ``w2`` in every active region at once. Combine: chain-reductions of
    the gated outputs along band rows, then along columns, then row and column multicasts put
    y on every core, column-split (:mod:`tilewright.compiler.mesh_moe`: a core's route ids stay
    within a few, whatever the number of experts; a schedule needing more than
    ``max_routes_per_core`` is refused, naming the limit it needs). Attention: once per batch
    token (each its own sequence of ``context`` cached tokens), as the dense decode layer.

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
    att = moe_attention_config(cfg)
    if context is not None and (phase == "prefill" or att is None):
        raise MeshScheduleError(
            f"context = {context}: sets decode's cached tokens for the attention block; "
            + (f"{name}'s attention is not modeled (n_heads unset), only its MoE block"
               if att is None else "prefill attends over its own tokens (use tokens)"))
    context = 4096 if context is None else context
    if context < 1:
        raise MeshScheduleError(f"context = {context}: must be >= 1")
    b = MeshProgramBuilder(f"{name}-{phase}-layer" if att else f"{name}-moe-{phase}", arch,
                           defects)
    if phase == "prefill":
        algo = algo or "mesh"
        if tokens < 1:
            raise MeshScheduleError(f"tokens = {tokens}: must be >= 1")
        counts = list(expert_tokens) if expert_tokens is not None else \
            _uniform_counts(tokens * k, n_exp)
        if len(counts) != n_exp or sum(counts) != tokens * k or min(counts) < 0:
            raise MeshScheduleError(f"expert_tokens: need {n_exp} counts >= 0 summing to "
                                    f"tokens x top_k = {tokens * k}; got {counts}")
        rows = [(e, counts[e], ffn) for e in range(n_exp)] + ([(n_exp, tokens, f_sh)] if f_sh
                                                               else [])
        c, groups, sub, g, q, regions, stages, listed = _expert_tiles(
            b.grid(square=True), rows, d, eb, n_exp)
        pm = sub.pr
        mask = sub.mask()
        st, dt = -(-tokens // pm), -(-d // pm)

        def gemm_mem(mt, kt, nt):
            return gemm_memory_bytes(algo, mt, kt, nt, kt, elem_bytes=eb, acc_bytes=eb)

        if att is not None:
            _emit_ops(b, attention_ops(att, phase, tokens=tokens, context=tokens, pr=pm, pc=pm),
                      sub, sub, algo, eb)
        mt, kt, nt = -(-tokens // pm), dt, -(-n_exp // pm)
        b.add("router", gemm_phase_specs(algo, sub, mt, kt, nt, elem_bytes=eb), mask,
              memory_bytes_per_core=gemm_mem(mt, kt, nt), useful_macs=tokens * d * n_exp)
        _vector(b, "router softmax + top-k", st * -(-n_exp // pm), 5, mask, 2, sub, st * eb)
        split = arch.mesh.max_routes_per_core < 4       # one direction per phase: 2 ids
        disp = relay_specs(sub, g, q, stages["dispatch"], "dispatch", split)
        check_routes(disp, arch.mesh, f"{name} prefill dispatch")
        b.add("dispatch", disp, mask)
        tiles = [(regions[t], [(n, w) for _, n, w in grp if n > 0])
                 for t, grp in enumerate(groups)]
        tiles = [(reg, items) for reg, items in tiles if items]
        act_mask = np.any([reg.mask() for reg, _ in tiles], axis=0)
        rounds = max(len(items) for _, items in tiles)

        def experts(op: str, kdim, ndim_of) -> None:
            """Round r: every tile's r-th expert with tokens, all tiles at once."""
            phases, mem, useful = [], 0, 0
            for r in range(rounds):
                per = []
                for reg, items in tiles:
                    if r < len(items):
                        n, w = items[r]
                        kk, nn = kdim(w), ndim_of(w)
                        m_t, k_t, n_t = -(-n // q), -(-kk // q), -(-nn // q)
                        per.append(gemm_phase_specs(algo, reg, m_t, k_t, n_t, elem_bytes=eb))
                        mem = max(mem, gemm_mem(m_t, k_t, n_t))
                        useful += n * kk * nn
                phases += _merge(per)
            b.add(op, phases, act_mask, memory_bytes_per_core=mem, useful_macs=useful)

        experts("experts w1", lambda w: d, lambda w: w)
        experts("experts w3", lambda w: d, lambda w: w)
        _vector(b, "experts silu(w1) * w3",
                max(sum(-(-n // q) * -(-w // q) for n, w in items) for _, items in tiles),
                5, act_mask, 0, sub, 0)
        experts("experts w2", lambda w: w, lambda w: d)
        b.add("combine", relay_specs(sub, g, q, stages["combine"], "combine", split), mask)
        _vector(b, "gated sum + residual", st * dt, 2 * k + 1 + (1 if f_sh else 0), mask, 0,
                sub, 0)
        meta = {"grid": f"{pm}x{pm}", "tiles": f"{g}x{g} of {q}x{q}", "experts_per_tile": c,
                "relay_messages": listed, "algo": algo, "expert_tokens": counts}
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
        if att is not None:      # one sequence per batch token, one after another
            first = len(b.tasks)
            _emit_ops(b, attention_ops(att, phase, tokens=1, context=context, pr=pr, pc=pc),
                      grid, grid, algo, eb)
            kvd = att.n_kv_heads * att.head_dim
            b.add("kv-cache shift", kv_shift_specs(grid, -(-2 * kvd // pc) * eb), mask)
            b.tasks[first:] = [t.model_copy(update={"repeat": t.repeat * bt,
                                                    "useful_macs": t.useful_macs * bt})
                               for t in b.tasks[first:]]
        kt, nt = -(-d // pr), -(-n_exp // pc)
        spec = gemv_phase_specs(algo, grid, kt, nt, elem_bytes=eb * bt, acc_bytes=eb * bt)
        for s in spec:
            s.macs *= bt
        b.add("router", spec, mask, memory_bytes_per_core=kt * nt * eb + (kt + 2 * nt) * eb * bt,
              useful_macs=bt * d * n_exp)
        _vector(b, "router softmax + top-k", bt * -(-n_exp // pc), 5, mask, 2, grid, bt * eb)
        tiling = rect_tiling(grid, n_reg)
        act_ids = [e for e in range(n_reg) if load[e] > 0]
        disp = decode_dispatch_specs(grid, tiling, act_ids, d, bt * eb)
        check_routes(disp, arch.mesh, f"{name} decode dispatch")
        b.add("dispatch", disp, mask)

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
        comb = decode_combine_specs(grid, tiling, act_ids, d, bt * eb)
        check_routes(comb, arch.mesh, f"{name} decode combine")
        ns = -(-d // tiling[3])
        b.add("combine", [PhaseSpec("gate scale + add", vector_ops=2 * bt * ns)] + comb, mask)
        _vector(b, "residual", bt * -(-d // pc), 1, mask, 0, grid, 0)
        meta = {"grid": f"{pr}x{pc}", "regions": f"{regions[0].pr}x{regions[0].pc}",
                "algo": algo, "token_experts": toks}
        if att is not None:
            meta["context"] = context
    attention = (f"GQA, {att.n_heads} heads, {att.n_kv_heads} kv heads" if att else
                 f"not modeled ({name}: n_heads unset, e.g. MLA): MoE block only")
    return b.program({"model": name, "phase": phase, "layer": "decoder" if att else "moe",
                      "attention": attention, **meta})
