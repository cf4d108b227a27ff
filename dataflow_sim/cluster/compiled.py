"""Per-chip layer compute time from the compiler (``cost_source="compiler"``, ArchSpec chips).

The layer a chip runs under a shard is built on the ``meta`` device with the model classes of
``models/transformer.py`` / ``models/moe.py`` and *divided* dimensions, compiled from shapes only
(:func:`tilewright.compile_flow.compile_module`: torch.export -> IR -> ``llm`` flow -> Program)
and costed by :func:`tilewright.dataflow_sim.report.program_report` for the cluster's ArchSpec in
the tensor engine's input format:

* **TP** divides query heads, KV heads (``max(1, Hkv / tp)``: replicated when tp > Hkv), the
  dense FFN width, the routed experts' FFN width and the shared-expert width (Megatron column/row
  parallel — the same per-chip widths as :func:`.workload.dims_of`);
* **EP** divides the routed experts (``E / ep`` local experts, top-k unchanged; a shape-only
  compile splits tokens evenly over experts, which reproduces the balanced load
  ``T·ep·k / E`` tokens per local expert). Needs ``top_k ≤ E / ep``, otherwise a
  :class:`~.cluster_spec.PlanError` (use ``cost_source="table"``);
* **SP** divides the sequence: the chip's ``s/sp`` new tokens attend to all ``s`` keys (after the
  K/V all-gather), compiled as the layer with a K/V cache of ``s − s/sp`` tokens — the last SP
  rank's chunk; the full ``q × c`` score rectangle is computed as in the table path.

Forward time of one layer = the Report's total ``time_cycles / clock`` (per micro-batch, per
shard). **Backward = 2 × forward GEMM time + 2 × forward non-GEMM time** (the table path's
convention: a GEMM's dgrad and wgrad are each one GEMM of the same MACs; a non-GEMM op's backward
costs twice its forward). GEMM rows are the Report rows with ``macs > 0``. In-layer collectives
still come from :func:`.workload.layer_ops` (the network times them); the embedding and the LM
head stay on the table/roofline costs (the compiler compiles one decoder layer).

Compiles are cached by (config, shard widths, seq, context, batch, phase, fmt, arch hash), so a
training step compiles each distinct shape once per process.
"""

from __future__ import annotations

import hashlib
from dataclasses import astuple, dataclass
from typing import Any

import pandas as pd

from tilewright.arch import ArchSpec
from tilewright.models.llm_configs import LlamaConfig, LLMConfig, MoEConfig

from .cluster_spec import PlanError
from .workload import COLUMNS, Dims, Shard, dims_of

__all__ = ["COST_SOURCES", "LayerReport", "compiled_layer", "cache_info", "clear_cache"]

COST_SOURCES = ("compiler", "table")
BACKWARD_GEMM_FACTOR = 2.0      # dgrad + wgrad, each the forward GEMM's MACs
BACKWARD_VECTOR_FACTOR = 2.0    # non-GEMM backward = 2 x forward (table convention)

_CACHE: dict[tuple, "LayerReport"] = {}
_STATS = {"hits": 0, "misses": 0}


@dataclass(frozen=True)
class LayerReport:
    """The compiler's Report of one sharded layer on one chip, and its times (seconds)."""

    report: pd.DataFrame
    clock_mhz: float

    @property
    def gemm(self) -> pd.Series:
        return self.report["macs"] > 0

    @property
    def forward_seconds(self) -> float:
        return float(self.report["time_cycles"].sum()) / (self.clock_mhz * 1e6)

    @property
    def forward_gemm_seconds(self) -> float:
        return float(self.report.loc[self.gemm, "time_cycles"].sum()) / (self.clock_mhz * 1e6)

    @property
    def backward_seconds(self) -> float:
        g = self.forward_gemm_seconds
        return BACKWARD_GEMM_FACTOR * g + BACKWARD_VECTOR_FACTOR * (self.forward_seconds - g)

    @property
    def gemm_macs(self) -> int:
        return int(self.report["macs"].sum())

    def op_table(self) -> pd.DataFrame:
        """Forward + backward rows in the :data:`.workload.COLUMNS` layout with ``seconds``
        and ``phase`` (backward rows scale the forward ones by the stated factors)."""
        r = self.report
        hz = self.clock_mhz * 1e6
        g = self.gemm.to_numpy()
        fwd = pd.DataFrame({"name": r["task"].to_numpy(), "kind": ["gemm" if x else "vector" for x in g],
                            "m": 0, "k": 0, "n": 0, "count": 1,
                            "flops": (2.0 * r["macs"] + r["vector_ops"]).to_numpy(dtype=float),
                            "bytes": r["bytes"].to_numpy(dtype=float), "collective": None,
                            "group": None, "comm_bytes": 0.0})[COLUMNS]
        fwd["seconds"] = r["time_cycles"].to_numpy() / hz
        bwd = fwd.iloc[::-1].copy()
        factor = [BACKWARD_GEMM_FACTOR if x else BACKWARD_VECTOR_FACTOR for x in g[::-1]]
        bwd["name"] = bwd["name"] + ".bwd"
        bwd["flops"] = bwd["flops"] * factor
        bwd["bytes"] = bwd["bytes"] * factor
        bwd["seconds"] = bwd["seconds"] * factor
        return pd.concat([fwd.assign(phase="forward"), bwd.assign(phase="backward")],
                         ignore_index=True).assign(source="compiler")


def _arch_hash(arch: ArchSpec) -> str:
    return hashlib.sha256(arch.model_dump_json().encode()).hexdigest()[:16]


def _module(cfg: LLMConfig, dm: Dims, max_seq_len: int) -> Any:
    from tilewright.models.moe import MoELayer  # noqa: PLC0415
    from tilewright.models.transformer import DecoderLayer, GroupedQueryAttention  # noqa: PLC0415

    ffn = None
    if isinstance(cfg, MoEConfig):
        if cfg.top_k > dm.experts:
            raise PlanError(f"{cfg.name}: cost_source='compiler' builds the EP shard as a MoE "
                            f"layer of {dm.experts} local experts, fewer than top_k = "
                            f"{cfg.top_k}; use cost_source='table' for this plan")
        n_shared = dm.f_shared // dm.f_exp if dm.f_exp else 0
        ffn = MoELayer(dm.d, dm.experts, cfg.top_k, dm.f_exp, n_shared_experts=n_shared,
                       router_score=cfg.router_score, norm_topk_prob=cfg.norm_topk_prob,
                       routed_scaling_factor=cfg.routed_scaling_factor)
    layer = DecoderLayer(dm.d, dm.h, dm.kv, dm.f if not dm.moe else dm.f_exp,
                         rope_theta=cfg.rope_theta, norm_eps=cfg.norm_eps,
                         max_seq_len=max_seq_len, ffn=ffn)
    # the shard keeps the model's head dim (DecoderLayer would derive d_model / local heads)
    layer.attn = GroupedQueryAttention(dm.d, dm.h, dm.kv, rope_theta=cfg.rope_theta,
                                       max_seq_len=max_seq_len, head_dim=dm.hd)
    return layer


def compiled_layer(cfg: LLMConfig, shard: Shard, arch: ArchSpec, *, batch: int, q_len: int,
                   ctx_len: int, fmt: str | None = None) -> LayerReport:
    """The compiler's Report of one layer of ``cfg`` on one chip of ``arch`` under ``shard``:
    ``batch`` sequences of ``q_len`` new tokens attending to ``ctx_len`` keys (``ctx_len ≥
    q_len``; ``ctx_len > q_len`` compiles a K/V cache of ``ctx_len − q_len`` tokens). Cached."""
    import torch  # noqa: PLC0415

    from tilewright.compile_flow import compile_module  # noqa: PLC0415

    if not isinstance(cfg, (LlamaConfig, MoEConfig)) or getattr(cfg, "n_heads", None) is None:
        dims_of(cfg, shard)    # raises the table path's clear error
    if ctx_len < q_len:
        raise ValueError(f"ctx_len ({ctx_len}) < q_len ({q_len})")
    fmt = fmt or arch.tensor_engine.input_format
    dm = dims_of(cfg, shard)
    phase = "prefill" if ctx_len == q_len else "chunk"
    key = (repr(cfg), astuple(dm), q_len, ctx_len, batch, phase, fmt, _arch_hash(arch))
    hit = _CACHE.get(key)
    if hit is not None:
        _STATS["hits"] += 1
        return hit
    _STATS["misses"] += 1
    with torch.device("meta"):
        module = _module(cfg, dm, max(ctx_len, getattr(cfg, "max_seq_len", ctx_len)))
    x = torch.empty(batch, q_len, dm.d, device="meta")
    example: tuple = (x,)
    if ctx_len > q_len:
        kv = torch.empty(batch, dm.kv, ctx_len - q_len, dm.hd, device="meta")
        example = (x, kv, kv.clone())
    name = f"{cfg.name}.tp{shard.tp}sp{shard.sp}ep{shard.ep}.b{batch}q{q_len}c{ctx_len}"
    out = compile_module(module, example, arch, fmt=fmt, name=name, execute=False)
    rep = LayerReport(out.report, float(out.report.attrs.get("clock_mhz", arch.clock_mhz)))
    _CACHE[key] = rep
    return rep


def cache_info() -> dict[str, int]:
    """Compile-cache counters: ``hits``, ``misses`` (= compiles), ``size``."""
    return {**_STATS, "size": len(_CACHE)}


def clear_cache() -> None:
    _CACHE.clear()
    _STATS.update(hits=0, misses=0)
