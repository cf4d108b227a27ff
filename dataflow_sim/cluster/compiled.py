"""Per-chip compute time from the compiler (``cost_source="compiler"``, ArchSpec chips).

The layer a chip runs under a shard is built on the ``meta`` device with the model classes of
``models/transformer.py`` / ``models/moe.py`` and *divided* dimensions, compiled from shapes only
(:func:`tilewright.dataflow_sim.compile_flow.compile_module`: torch.export -> IR -> ``llm`` flow -> Program)
and costed by :func:`tilewright.dataflow_sim.report.program_report` for the cluster's ArchSpec in
the tensor engine's input format:

* **TP** divides query heads, KV heads (``max(1, Hkv / tp)``: replicated when tp > Hkv), the
  dense FFN width, the routed experts' FFN width and the shared-expert width (Megatron column/row
  parallel — the same per-chip widths as :func:`.workload.dims_of`);
* **EP**: the shard is built with the model's full router (all ``E`` experts, top-k unchanged —
  the router weight is replicated on every EP rank) and stacked expert weights; after lowering,
  every grouped GEMM's per-expert row counts are set to what this chip's ``E / ep`` local experts
  receive: the ``T·k`` routed rows of the EP group's balanced load (``T·ep·k/E`` each, split
  evenly, remainder to the first experts) and 0 for the other experts' slots. This works for any
  ``top_k`` versus ``E / ep`` (a rank may hold fewer experts than ``top_k``). Serving replaces
  the counts per iteration with the drawn routing loads (:meth:`LayerReport.expert_seconds`);
* **SP** divides the sequence: the chip's ``s/sp`` new tokens attend to all ``s`` keys (after the
  K/V all-gather), compiled as the layer with a K/V cache of ``s − s/sp`` tokens — the last SP
  rank's chunk.

Forward time of one layer = the Report's total ``time_cycles / clock`` (per micro-batch, per
shard). **Backward** (:func:`backward_report`) is compiled too: every GEMM task ``A(m×k)·B(k×n)``
of the forward Program gets its two backward GEMMs, ``dA = dC·Bᵀ`` (m×n×k) and ``dB = Aᵀ·dC``
(k×m×n) (same batch), each mapped by the compiler's mapper
(:func:`tilewright.compiler.lower_llm.map_gemm_cached`) as a Program task and costed by the same
Report; a grouped expert GEMM's dgrad is a grouped GEMM with the same counts and its wgrad one
``k × c × n`` GEMM per expert with ``c`` rows (batched over experts of equal ``c``). The fused
attention task's backward is costed as **two** copies of the forward task (its dQ, dK, dP, dV
block GEMMs are the forward QKᵀ and PV MACs twice over the same visited blocks; its vector passes
are charged twice). Non-GEMM tasks (norms, activations, quantize, routing, scan) cost **twice**
their forward row (cycles, bytes, time) — the only factor left.

The LM head (final RMSNorm, the TP-split vocabulary projection, logits softmax) is compiled the
same way (:func:`compiled_head`), and so is the embedding lookup (:func:`compiled_embedding`:
``nn.Embedding`` of the chip's vocabulary slice -> ``aten.embedding`` -> one ``take_rows`` row
gather, costed by the bytes it moves) and, for serving, one sequence's attention
(:func:`compiled_attention`).

**Mamba** layers (:func:`_compiled_mamba`) are :class:`~tilewright.models.ssm.MambaLayer`\ s
with the chip's ``d_inner/tp`` channels (TP rule in :mod:`.workload`); the scan is compiled to
a ``scan`` task. ``torch.export`` unrolls the scan's time loop, so a sequence longer than
:data:`MAMBA_CHUNK` tokens is compiled as chunks of ``gcd(s, MAMBA_CHUNK)`` tokens with carried
conv/scan state and the chunk's Report is multiplied by the number of chunks.

Compiles are cached by (config, shard widths, seq, context, batch, phase, fmt, arch hash), so a
training step compiles each distinct shape once per process.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import astuple, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tilewright.arch import ArchSpec
from tilewright.compiler.lower_llm import ELEM_BYTES, map_gemm_cached
from tilewright.compiler.operand_formats import arch_for_format
from tilewright.compiler.program import BgemmTask, GemmTask
from tilewright.dataflow_sim.compile_flow import compile_module
from tilewright.dataflow_sim.report import program_report
from tilewright.models.llm_configs import (DeepSeekConfig, LlamaConfig, LLMConfig, MambaConfig,
                                           MoEConfig)
from tilewright.models.mla import MLAttention
from tilewright.models.moe import MoELayer
from tilewright.models.ssm import MambaLayer
from tilewright.models.transformer import DecoderLayer, GroupedQueryAttention, RMSNorm, causal_mask

from .workload import COLUMNS, Dims, Shard, dims_of

__all__ = ["COST_SOURCES", "LayerReport", "compiled_layer", "compiled_head", "compiled_embedding",
           "compiled_attention", "backward_report",
           "local_expert_counts", "cache_info", "clear_cache"]

COST_SOURCES = ("compiler", "table")
BACKWARD_VECTOR_FACTOR = 2.0    # non-GEMM backward = 2 x forward (the one stated factor)
ATTENTION_BACKWARD_COPIES = 2   # fused attention backward = 2 x the forward task (module doc)

_CACHE: dict[tuple, "LayerReport"] = {}
_STATS = {"hits": 0, "misses": 0}
_GEMM_KINDS = ("bgemm", "grouped_gemm", "gemm", "attention")
MAMBA_CHUNK = 16
"""tokens per compiled Mamba chunk (torch.export unrolls the scan's time loop: compile time
grows with the tokens, so longer sequences are compiled as chunks with carried state)"""
_SCALED = ("macs", "vector_ops", "cycles", "bytes", "mem_cycles", "time_cycles")


def _seconds(df: pd.DataFrame, hz: float) -> float:
    return float(df["time_cycles"].sum()) / hz


@dataclass(frozen=True)
class LayerReport:
    """The compiler's forward and backward Reports of one sharded layer (or LM head) on one
    chip, and their times (seconds). ``program``/``arch`` are the forward Program and the
    format-adjusted ArchSpec it was costed on (for re-costing expert GEMMs under other loads)."""

    report: pd.DataFrame
    clock_mhz: float
    backward: pd.DataFrame = field(default_factory=pd.DataFrame)
    program: Any = None
    arch: ArchSpec | None = None
    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def hz(self) -> float:
        return self.clock_mhz * 1e6

    @property
    def gemm(self) -> pd.Series:
        return self.report["macs"] > 0

    @property
    def forward_seconds(self) -> float:
        return _seconds(self.report, self.hz)

    @property
    def forward_gemm_seconds(self) -> float:
        return _seconds(self.report[self.gemm], self.hz)

    @property
    def backward_seconds(self) -> float:
        """Compiled backward GEMMs + 2 x the forward non-GEMM tasks (module docstring)."""
        return _seconds(self.backward, self.hz)

    @property
    def gemm_macs(self) -> int:
        return int(self.report["macs"].sum())

    @property
    def backward_gemm_macs(self) -> int:
        return int(self.backward["macs"].sum())

    @property
    def expert_gemm_seconds(self) -> float:
        """Forward time of the grouped (routed-expert) GEMMs at the compiled counts."""
        return _seconds(self.report[self.report["kind"] == "grouped_gemm"], self.hz)

    def expert_seconds(self, counts: np.ndarray) -> float:
        """Forward seconds of this layer's grouped expert GEMMs when the chip's local experts
        receive ``counts`` rows each (the compiler's Report of the same tasks with those
        counts; memoized by the counts)."""
        key = tuple(int(c) for c in counts)
        t = self._memo.get(key)
        if t is None:
            tasks = [_with_counts(x, key) for x in self.program.tasks
                     if x.kind == "grouped_gemm"]
            if not tasks or sum(key) == 0:
                t = 0.0
            else:
                rep = program_report(self.program.model_copy(update={"tasks": tasks}), self.arch)
                t = _seconds(rep, self.hz)
            self._memo[key] = t
        return t

    def op_table(self) -> pd.DataFrame:
        """Forward and backward rows in the :data:`.workload.COLUMNS` layout with ``seconds``
        and ``phase``."""
        hz = self.hz

        def rows(r: pd.DataFrame, phase: str) -> pd.DataFrame:
            g = r["macs"].to_numpy() > 0
            df = pd.DataFrame({"name": r["task"].to_numpy(),
                               "kind": np.where(g, "gemm", "vector"), "m": 0, "k": 0, "n": 0,
                               "count": 1,
                               "flops": (2.0 * r["macs"] + r["vector_ops"]).to_numpy(dtype=float),
                               "bytes": r["bytes"].to_numpy(dtype=float), "collective": None,
                               "group": None, "comm_bytes": 0.0})[COLUMNS]
            df["seconds"] = r["time_cycles"].to_numpy() / hz
            return df.assign(phase=phase)

        return pd.concat([rows(self.report, "forward"), rows(self.backward, "backward")],
                         ignore_index=True).assign(source="compiler")


def _with_counts(task: Any, counts: tuple[int, ...]) -> Any:
    """A grouped GEMM task whose first ``len(counts)`` experts get ``counts`` rows, others 0."""
    full = tuple(counts) + (0,) * (task.experts - len(counts))
    return task.model_copy(update={"example_counts": full, "rows": int(sum(full)),
                                   "counts_source": "cluster: EP-local loads"})


def local_expert_counts(rows: int, local_experts: int) -> tuple[int, ...]:
    """``rows`` routed rows split evenly over ``local_experts`` experts (remainder first)."""
    base, rem = divmod(rows, local_experts)
    return tuple(base + (e < rem) for e in range(local_experts))


def backward_report(program: Any, report: pd.DataFrame, arch: ArchSpec) -> pd.DataFrame:
    """Backward Report rows of a forward ``program`` (and its Report ``report``, row per task)
    on ``arch`` (the format-adjusted ArchSpec the forward was costed on); conventions in the
    module docstring. Rows come in reverse task order; ``task`` names end in ``.dgrad``,
    ``.wgrad`` or ``.bwd``."""

    key = arch.content_hash()

    def bgemm(t: Any, name: str, m: int, k: int, n: int, batch: tuple[int, ...]) -> Any:
        nb = int(np.prod(batch, dtype=np.int64)) if batch else 1
        mp = map_gemm_cached(arch, m, k, n, batch=nb, elem_bytes=ELEM_BYTES[t.format],
                             arch_key=key, name=name).mapping
        return BgemmTask(name=name, a=t.a, b=t.b, out=t.out, batch=batch, m=m, k=k, n=n,
                         format=t.format, acc=t.acc, k_block=t.k_block, tile_m=mp.m_t,
                         tile_n=mp.n_t, tile_k=mp.k_t, order=mp.order, dataflow=mp.dataflow,
                         source=t.source)

    parts: list[pd.DataFrame] = []
    for t, (_, row) in zip(reversed(program.tasks), report.iloc[::-1].iterrows()):
        if t.kind not in _GEMM_KINDS:
            scaled = row.copy()
            for c in ("cycles", "bytes", "mem_cycles", "time_cycles", "vector_ops",
                      "scratchpad_bytes", "accumulator_bytes"):
                scaled[c] = BACKWARD_VECTOR_FACTOR * row[c]
            scaled["task"] = f"{row['task']}.bwd"
            parts.append(pd.DataFrame([scaled]))
            continue
        if t.kind == "bgemm":
            tasks = [bgemm(t, f"{t.name}.dgrad", t.m, t.n, t.k, t.batch),
                     bgemm(t, f"{t.name}.wgrad", t.k, t.m, t.n, t.batch)]
        elif t.kind == "gemm":
            tasks = [GemmTask(name=f"{t.name}.dgrad", a=t.a, b=t.b, out=t.out, m=t.m, k=t.n,
                              n=t.k, source=t.source),
                     GemmTask(name=f"{t.name}.wgrad", a=t.a, b=t.b, out=t.out, m=t.k, k=t.m,
                              n=t.n, source=t.source)]
        elif t.kind == "grouped_gemm":
            counts = list(t.example_counts) or list(local_expert_counts(t.rows, t.experts))
            tasks = [t.model_copy(update={"name": f"{t.name}.dgrad", "k": t.n, "n": t.k,
                                          "example_counts": tuple(counts),
                                          "rows": int(sum(counts))})]
            tasks += [bgemm(t, f"{t.name}.wgrad.c{c}", t.k, c, t.n, (num,))
                      for c, num in sorted(Counter(c for c in counts if c > 0).items())]
        else:   # fused attention
            tasks = [t.model_copy(update={"name": f"{t.name}.bwd{i}"})
                     for i in range(ATTENTION_BACKWARD_COPIES)]
        parts.append(program_report(program.model_copy(update={"tasks": tasks}), arch))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=report.columns)
    out.attrs.update(report.attrs)
    return out


def _arch_hash(arch: ArchSpec) -> str:
    return hashlib.sha256(arch.model_dump_json().encode()).hexdigest()[:16]


def _mla_module(cfg: DeepSeekConfig, dm: Dims, max_seq_len: int) -> Any:
    """A DeepSeek decoder layer on one chip: MLA with the chip's ``h / tp`` heads (latent
    projections whole) and the MoE FFN of :func:`_module`'s shard widths."""
    n_shared = dm.f_shared // dm.f_exp if dm.f_exp else 0
    ffn = MoELayer(dm.d, dm.n_experts, cfg.top_k, dm.f_exp, n_shared_experts=n_shared,
                   router_score=cfg.router_score, norm_topk_prob=cfg.norm_topk_prob,
                   routed_scaling_factor=cfg.routed_scaling_factor)
    layer = DecoderLayer(dm.d, 1, 1, dm.f_exp, rope_theta=cfg.rope_theta, norm_eps=cfg.norm_eps,
                         max_seq_len=1, ffn=ffn)
    layer.attn = MLAttention(
        dm.d, dm.h, q_lora_rank=dm.q_rank, kv_lora_rank=dm.kv_rank, qk_nope_head_dim=dm.dn,
        qk_rope_head_dim=dm.dr, v_head_dim=dm.dv, rope_theta=cfg.rope_theta,
        max_seq_len=max_seq_len, norm_eps=cfg.norm_eps, yarn=cfg.yarn)
    return layer


def _module(cfg: LLMConfig, dm: Dims, max_seq_len: int) -> Any:
    if dm.mla:
        return _mla_module(cfg, dm, max_seq_len)  # type: ignore[arg-type]

    ffn = None
    if isinstance(cfg, MoEConfig):
        # the full router and top-k over all E experts; the grouped GEMMs' counts are set to
        # this chip's local experts after lowering (module docstring, EP)
        n_shared = dm.f_shared // dm.f_exp if dm.f_exp else 0
        ffn = MoELayer(dm.d, dm.n_experts, cfg.top_k, dm.f_exp, n_shared_experts=n_shared,
                       router_score=cfg.router_score, norm_topk_prob=cfg.norm_topk_prob,
                       routed_scaling_factor=cfg.routed_scaling_factor)
    layer = DecoderLayer(dm.d, dm.h, dm.kv, dm.f if not dm.moe else dm.f_exp,
                         rope_theta=cfg.rope_theta, norm_eps=cfg.norm_eps,
                         max_seq_len=max_seq_len, ffn=ffn)
    # the shard keeps the model's head dim (DecoderLayer would derive d_model / local heads)
    layer.attn = GroupedQueryAttention(dm.d, dm.h, dm.kv, rope_theta=cfg.rope_theta,
                                       max_seq_len=max_seq_len, head_dim=dm.hd)
    return layer


def _compile(module: Any, example: tuple, arch: ArchSpec, fmt: str, name: str,
             expert_counts: tuple[int, ...] | None = None) -> LayerReport:
    """Compile shape-only; optionally set every grouped GEMM's counts; forward + backward."""

    out = compile_module(module, example, arch, fmt=fmt, name=name, execute=False)
    farch = arch_for_format(arch, fmt)
    program, report = out.program, out.report
    if expert_counts is not None and any(t.kind == "grouped_gemm" for t in program.tasks):
        program = program.model_copy(update={"tasks": [
            _with_counts(t, expert_counts) if t.kind == "grouped_gemm" else t
            for t in program.tasks]})
        report = program_report(program, farch)
    clock = float(report.attrs.get("clock_mhz", arch.clock_mhz))
    return LayerReport(report, clock, backward_report(program, report, farch), program, farch)


def _check_cfg(cfg: LLMConfig) -> None:
    if isinstance(cfg, MambaConfig):
        return
    if isinstance(cfg, DeepSeekConfig):
        return
    if not isinstance(cfg, (LlamaConfig, MoEConfig)) or getattr(cfg, "n_heads", None) is None:
        dims_of(cfg, Shard())    # raises the table path's clear error


def _mamba_module(cfg: MambaConfig, dm: Dims) -> Any:
    """A :class:`~tilewright.models.ssm.MambaLayer` with this chip's ``d_inner / tp`` channels
    (module docstring of :mod:`.workload`: in_proj columns, x_proj rows, dt_proj outputs, conv,
    A, D and out_proj rows split; R + 2N replicated)."""
    import torch  # noqa: PLC0415  (lazy: torch is heavy)
    from torch import nn  # noqa: PLC0415  (lazy: torch is heavy)


    layer = MambaLayer(dm.d, norm_eps=cfg.norm_eps, d_state=dm.n_state, expand=1,
                       d_conv=dm.d_conv, dt_rank=dm.dt_rank)
    mx, di, n, r = layer.mixer, dm.di, dm.n_state, dm.dt_rank
    mx.d_inner = di
    mx.in_proj = nn.Linear(dm.d, 2 * di, bias=False)
    mx.conv1d = nn.Conv1d(di, di, dm.d_conv, groups=di, bias=True)
    mx.x_proj = nn.Linear(di, r + 2 * n, bias=False)
    mx.dt_proj = nn.Linear(r, di, bias=True)
    mx.A_log = nn.Parameter(torch.empty(di, n))
    mx.D = nn.Parameter(torch.empty(di))
    mx.out_proj = nn.Linear(di, dm.d, bias=False)
    return layer


def _scaled(rep: LayerReport, k: int) -> LayerReport:
    """``rep`` with every per-task count and time multiplied by ``k`` (k identical chunks)."""
    def mul(df: pd.DataFrame) -> pd.DataFrame:
        out = df.copy()
        for c in _SCALED:
            if c in out:
                out[c] = out[c] * k
        out.attrs.update(df.attrs)
        return out

    return LayerReport(mul(rep.report), rep.clock_mhz, mul(rep.backward), rep.program, rep.arch)


def _compiled_mamba(cfg: MambaConfig, shard: Shard, arch: ArchSpec, fmt: str, batch: int,
                    q_len: int, ctx_len: int) -> LayerReport:
    """Mamba layer: ``q_len`` tokens of ``batch`` sequences (``ctx_len > q_len``: continuing
    with carried conv/scan state). More than :data:`MAMBA_CHUNK` tokens are compiled as
    ``q_len / q`` chunks of ``q = gcd(q_len, MAMBA_CHUNK)`` tokens with carried state, the
    chunk's Report times ``q_len / q`` (the layer's cost is linear in tokens; the first chunk's
    zero-padded conv start is costed as a carried-state chunk)."""
    import torch  # noqa: PLC0415  (lazy: torch is heavy)

    if shard.sp > 1:
        raise ValueError(f"{cfg.name}: sequence parallelism over a Mamba recurrence is not "
                         "modelled (use sp=1)")
    dm = dims_of(cfg, shard)
    chunks = 1
    if q_len > MAMBA_CHUNK:
        q = math.gcd(q_len, MAMBA_CHUNK)
        chunks, q_len, ctx_len = q_len // q, q, ctx_len + 1
    state = ctx_len > q_len
    key = ("mamba", repr(cfg), astuple(dm), q_len, state, batch, fmt, _arch_hash(arch))
    rep = _CACHE.get(key)
    if rep is not None:
        _STATS["hits"] += 1
    else:
        _STATS["misses"] += 1
        with torch.device("meta"):
            module = _mamba_module(cfg, dm)
        x = torch.empty(batch, q_len, dm.d, device="meta")
        example: tuple = (x,)
        if state:
            example = (x, torch.empty(batch, dm.di, dm.d_conv, device="meta"),
                       torch.empty(batch, dm.di, dm.n_state, device="meta"))
        name = f"{cfg.name}.tp{shard.tp}.b{batch}q{q_len}{'s' if state else ''}"
        rep = _CACHE[key] = _compile(module, example, arch, fmt, name)
    return rep if chunks == 1 else _scaled(rep, chunks)


def compiled_layer(cfg: LLMConfig, shard: Shard, arch: ArchSpec, *, batch: int, q_len: int,
                   ctx_len: int, fmt: str | None = None) -> LayerReport:
    """The compiler's Reports of one layer of ``cfg`` on one chip of ``arch`` under ``shard``:
    ``batch`` sequences of ``q_len`` new tokens attending to ``ctx_len`` keys (``ctx_len ≥
    q_len``; ``ctx_len > q_len`` compiles a K/V cache of ``ctx_len − q_len`` tokens). MoE
    layers: the local experts get the EP group's balanced load. Mamba layers
    (:func:`_compiled_mamba`): ``ctx_len > q_len`` means carried conv/scan state (its size does
    not depend on ``ctx_len``). Cached."""
    import torch  # noqa: PLC0415  (lazy: torch is heavy)

    _check_cfg(cfg)
    if ctx_len < q_len:
        raise ValueError(f"ctx_len ({ctx_len}) < q_len ({q_len})")
    fmt = fmt or arch.tensor_engine.input_format
    if isinstance(cfg, MambaConfig):
        return _compiled_mamba(cfg, shard, arch, fmt, batch, q_len, ctx_len)
    dm = dims_of(cfg, shard)
    phase = "prefill" if ctx_len == q_len else "chunk"
    key = ("layer", repr(cfg), astuple(dm), q_len, ctx_len, batch, phase, fmt, _arch_hash(arch))
    hit = _CACHE.get(key)
    if hit is not None:
        _STATS["hits"] += 1
        return hit
    _STATS["misses"] += 1
    with torch.device("meta"):
        module = _module(cfg, dm, max(ctx_len, getattr(cfg, "max_seq_len", ctx_len)))
    x = torch.empty(batch, q_len, dm.d, device="meta")
    example: tuple = (x,)
    if ctx_len > q_len and dm.mla:      # latent cache: c_kv [B, T, r], k_pe [B, T, dr]
        example = (x, torch.empty(batch, ctx_len - q_len, dm.kv_rank, device="meta"),
                   torch.empty(batch, ctx_len - q_len, dm.dr, device="meta"))
    elif ctx_len > q_len:
        kv = torch.empty(batch, dm.kv, ctx_len - q_len, dm.hd, device="meta")
        example = (x, kv, kv.clone())
    name = f"{cfg.name}.tp{shard.tp}sp{shard.sp}ep{shard.ep}.b{batch}q{q_len}c{ctx_len}"
    counts = local_expert_counts(batch * q_len * dm.top_k, dm.experts) if dm.moe else None
    rep = _CACHE[key] = _compile(module, example, arch, fmt, name, counts)
    return rep


class _LMHead:
    """Final RMSNorm, the chip's vocabulary slice of the LM head, softmax over it."""

    @staticmethod
    def build(d: int, vocab: int, eps: float) -> Any:
        import torch  # noqa: PLC0415  (lazy: torch is heavy)


        class LMHead(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.norm = RMSNorm(d, eps=eps)
                self.proj = torch.nn.Linear(d, vocab, bias=False)

            def forward(self, x):
                return torch.softmax(self.proj(self.norm(x)), dim=-1)

        return LMHead()


def compiled_head(cfg: LLMConfig, shard: Shard, arch: ArchSpec, *, tokens: int,
                  fmt: str | None = None) -> LayerReport:
    """The compiler's Reports of the LM head on one chip for ``tokens`` rows: final RMSNorm,
    ``D × ceil(V/tp)`` projection, softmax over the local vocabulary (the loss's exp/sum).
    Cached."""
    import torch  # noqa: PLC0415  (lazy: torch is heavy)

    _check_cfg(cfg)
    fmt = fmt or arch.tensor_engine.input_format
    dm = dims_of(cfg, shard)
    key = ("head", repr(cfg), dm.d, dm.vocab, tokens, fmt, _arch_hash(arch))
    hit = _CACHE.get(key)
    if hit is not None:
        _STATS["hits"] += 1
        return hit
    _STATS["misses"] += 1
    with torch.device("meta"):
        module = _LMHead.build(dm.d, dm.vocab, cfg.norm_eps)
    x = torch.empty(1, tokens, dm.d, device="meta")
    rep = _CACHE[key] = _compile(module, (x,), arch, fmt, f"{cfg.name}.head.tp{shard.tp}.t{tokens}")
    return rep


_ELEM_DTYPES = {1: "int8", 2: "bfloat16", 4: "float32"}


def compiled_embedding(cfg: LLMConfig, shard: Shard, arch: ArchSpec, *, tokens: int,
                       element_bytes: int, fmt: str | None = None) -> LayerReport:
    """The compiler's Reports of the embedding lookup on one chip for ``tokens`` token ids: an
    ``nn.Embedding`` of the chip's ``ceil(V/tp) × D`` vocabulary slice (Megatron's
    vocab-parallel embedding: every chip looks up every token in its slice, then a TP
    all-reduce) with weights of ``element_bytes`` bytes, compiled through ``aten.embedding`` to a
    row gather (``take_rows``, costed by the bytes it moves). Cached."""
    import torch  # noqa: PLC0415  (lazy: torch is heavy)

    _check_cfg(cfg)
    fmt = fmt or arch.tensor_engine.input_format
    dm = dims_of(cfg, shard)
    key = ("embedding", repr(cfg), dm.d, dm.vocab, tokens, element_bytes, fmt, _arch_hash(arch))
    hit = _CACHE.get(key)
    if hit is not None:
        _STATS["hits"] += 1
        return hit
    _STATS["misses"] += 1
    dtype = getattr(torch, _ELEM_DTYPES[element_bytes])
    with torch.device("meta"):
        module = torch.nn.Embedding(dm.vocab, dm.d)
        module.weight = torch.nn.Parameter(torch.empty(dm.vocab, dm.d, dtype=dtype),
                                           requires_grad=False)
    ids = torch.empty(tokens, dtype=torch.int64, device="meta")     # 1-D: one gather task
    rep = _CACHE[key] = _compile(module, (ids,), arch, fmt,
                                 f"{cfg.name}.embedding.tp{shard.tp}.t{tokens}")
    return rep


class _AttentionCore:
    """Causal grouped-query attention of ``q`` new tokens over ``c`` keys, exactly the KV append,
    score, mask, softmax and value ops of
    :class:`~tilewright.models.transformer.GroupedQueryAttention` (no projections, no rotary):
    the compiler fuses them into one ``attention`` task. With a cache (``c > q``) the inputs are
    ``(qg, k_cache, v_cache, k_new, v_new)`` and the new keys/values are appended to the cache
    as in the layer (the compiler's KV append: only the new tokens move, the cache is stored in
    the operand format); without one ``(qg, k, v)``."""

    @staticmethod
    def build(hd: int) -> Any:
        import torch  # noqa: PLC0415  (lazy: torch is heavy)


        class AttentionCore(torch.nn.Module):
            def forward(self, qg, k, v, k_new=None, v_new=None):
                if k_new is not None:
                    k, v = torch.cat((k, k_new), dim=2), torch.cat((v, v_new), dim=2)
                s, t = qg.shape[-2], k.shape[-2] - qg.shape[-2]
                scores = torch.matmul(qg, k.unsqueeze(2).transpose(-1, -2)) * (1.0 / math.sqrt(hd))
                scores = scores.masked_fill(causal_mask(s, t, qg.device), float("-inf"))
                return torch.matmul(torch.softmax(scores, dim=-1), v.unsqueeze(2))

        return AttentionCore()


def compiled_attention(cfg: LLMConfig, shard: Shard, arch: ArchSpec, *, q_len: int, ctx_len: int,
                       fmt: str | None = None, batch: int = 1) -> LayerReport:
    """The compiler's Reports of the attention of ``batch`` sequences of equal shape in one
    layer on one chip, as one batched task (as the whole layer compiles it): the chip's ``h/tp``
    query heads (grouped over its KV heads) for ``q_len`` new tokens over ``ctx_len`` keys
    (``ctx_len ≥ q_len``, causal) per sequence. Cached per (batch, q_len, ctx_len)."""
    import torch  # noqa: PLC0415  (lazy: torch is heavy)

    _check_cfg(cfg)
    if ctx_len < q_len:
        raise ValueError(f"ctx_len ({ctx_len}) < q_len ({q_len})")
    if batch < 1:
        raise ValueError(f"batch ({batch}) < 1")
    fmt = fmt or arch.tensor_engine.input_format
    dm = dims_of(cfg, shard)
    hv = dm.hd_v or dm.hd       # value width (MLA: the latent's r features of its r + dr)
    key = ("attention", dm.h, dm.kv, dm.hd, hv, batch, q_len, ctx_len, fmt, _arch_hash(arch))
    hit = _CACHE.get(key)
    if hit is not None:
        _STATS["hits"] += 1
        return hit
    _STATS["misses"] += 1
    g = dm.h // dm.kv
    b = batch
    qg = torch.empty(b, dm.kv, g, q_len, dm.hd, device="meta")
    if ctx_len > q_len:         # the cache and the new tokens' K/V, appended (as in the layer)
        kv = torch.empty(b, dm.kv, ctx_len - q_len, dm.hd, device="meta")
        new = torch.empty(b, dm.kv, q_len, dm.hd, device="meta")
        v = torch.empty(b, dm.kv, ctx_len - q_len, hv, device="meta")
        v_new = torch.empty(b, dm.kv, q_len, hv, device="meta")
        example: tuple = (qg, kv, v, new, v_new)
    else:
        kv = torch.empty(b, dm.kv, ctx_len, dm.hd, device="meta")
        example = (qg, kv, torch.empty(b, dm.kv, ctx_len, hv, device="meta"))
    rep = _CACHE[key] = _compile(_AttentionCore.build(dm.hd), example, arch, fmt,
                                 f"{cfg.name}.attention.tp{shard.tp}.b{b}q{q_len}c{ctx_len}")
    return rep


def cache_info() -> dict[str, int]:
    """Compile-cache counters: ``hits``, ``misses`` (= compiles), ``size``."""
    return {**_STATS, "size": len(_CACHE)}


def clear_cache() -> None:
    _CACHE.clear()
    _STATS.update(hits=0, misses=0)
