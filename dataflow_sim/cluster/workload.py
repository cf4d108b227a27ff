"""Per-chip op lists of transformer, MoE and Mamba layers under a parallelism plan.

A stand-in for the compiler's Program until it lowers whole sharded models: the interface is
only "a table of ops with FLOPs, bytes and GEMM shapes, per chip, per micro-batch". Shapes follow
``models/llm_configs.py`` (Llama-3 GQA + SwiGLU; Mixtral-style MoE FFN).

Sharding: TP splits attention heads (query and KV) and FFN widths (Megatron column/row
parallel, two all-reduces of the activations per layer); SP (context parallelism) splits the
sequence, all-gathering K and V before attention; EP splits the routed experts, with an
all-to-all before (dispatch) and after (combine) them; experts' FFN width is also split by TP.

Mamba (SSM) TP rule: the ``d_inner`` channels are split — ``in_proj`` column-parallel (each
chip gets ``d_inner/tp`` channels of x and of the gate z), the depthwise conv, ``dt_proj``'s
outputs, ``A``, ``D`` and the scan channels local; ``x_proj`` row-parallel (its ``R + 2N``
outputs — dt, B, C, shared by all channels — are partial sums, all-reduced over TP, then
replicated); ``out_proj`` row-parallel (all-reduce of the ``D``-wide output). Two TP
all-reduces per layer, of ``T·(R + 2N)`` and ``T·D`` elements. A Mamba layer has no attention:
its cost per token does not depend on the context length.

Op costing conventions (stated so they can be checked):

* Attention is unfused: scores ``Q·Kᵀ`` and ``P·V`` are GEMMs per KV head (the ``g = H/Hkv``
  query heads of a group stacked into M), the softmax reads and writes the ``q×c`` score matrix.
  A causal mask is applied, not skipped: the full ``q×c`` rectangle is computed.
* Non-GEMM ops carry FLOPs (elementwise ops counted per output element: RMSNorm 4/elem, rotary
  3, SiLU·mul 5, softmax 5, residual add 1, weighted combine 2·top_k) and bytes (every input read
  and output written once).
* Backward of a GEMM ``A(m×k)·B(k×n)`` is ``dA = dC·Bᵀ`` (m×n×k) plus ``dB = Aᵀ·dC`` (k×m×n);
  backward of a non-GEMM op costs twice its forward FLOPs and bytes. Collectives mirror:
  all-reduce ↔ all-reduce, all-gather ↔ reduce-scatter, all-to-all ↔ all-to-all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tilewright.models.llm_configs import LlamaConfig, LLMConfig, MambaConfig, MoEConfig, get_config

__all__ = ["Shard", "Dims", "dims_of", "layer_ops", "embedding_ops", "head_ops", "backward_ops",
           "token_gemms", "token_vectors", "COLUMNS", "BACKWARD_COLLECTIVE"]

COLUMNS = ["name", "kind", "m", "k", "n", "count", "flops", "bytes", "collective", "group",
           "comm_bytes"]
BACKWARD_COLLECTIVE = {"all_reduce": "all_reduce", "all_gather": "reduce_scatter",
                       "reduce_scatter": "all_gather", "all_to_all": "all_to_all"}


@dataclass(frozen=True)
class Shard:
    """Parallel degrees that split one layer's work (counts)."""

    tp: int = 1
    sp: int = 1
    ep: int = 1


@dataclass(frozen=True)
class Dims:
    """Per-chip widths of one layer (features) under a shard."""

    d: int          # d_model
    h: int          # query heads on this chip
    kv: int         # KV heads on this chip (replicated when tp > n_kv_heads)
    hd: int         # head dim
    g: int          # query heads per KV head
    f: int          # dense FFN width on this chip
    vocab: int      # LM-head columns on this chip
    moe: bool
    experts: int = 0      # routed experts on this chip
    n_experts: int = 0
    top_k: int = 0
    f_exp: int = 0        # routed expert FFN width on this chip
    f_shared: int = 0     # shared-expert FFN width on this chip
    ssm: bool = False     # Mamba (selective state space) layer instead of attention + FFN
    di: int = 0           # Mamba scan channels on this chip (d_inner / tp)
    n_state: int = 0      # Mamba state size N per channel
    dt_rank: int = 0      # Mamba dt rank R (x_proj gives R + 2N columns, replicated)
    d_conv: int = 0       # Mamba depthwise conv kernel (taps)


def dims_of(cfg: LLMConfig | str, shard: Shard) -> Dims:
    """Per-chip widths; the caller has validated divisibility (see :mod:`.plan`)."""
    cfg = get_config(cfg) if isinstance(cfg, str) else cfg
    if isinstance(cfg, LlamaConfig):
        hd = cfg.head_dim
        return Dims(cfg.d_model, cfg.n_heads // shard.tp, max(1, cfg.n_kv_heads // shard.tp), hd,
                    cfg.n_heads // cfg.n_kv_heads, cfg.d_ffn // shard.tp,
                    math.ceil(cfg.vocab_size / shard.tp), moe=False)
    if isinstance(cfg, MoEConfig) and cfg.n_heads is not None:
        hd = cfg.head_dim
        return Dims(cfg.d_model, cfg.n_heads // shard.tp, max(1, cfg.n_kv_heads // shard.tp), hd,
                    cfg.n_heads // cfg.n_kv_heads, cfg.d_dense_ffn // shard.tp,
                    math.ceil(cfg.vocab_size / shard.tp), moe=True,
                    experts=cfg.n_experts // shard.ep, n_experts=cfg.n_experts, top_k=cfg.top_k,
                    f_exp=cfg.d_expert_ffn // shard.tp,
                    f_shared=cfg.shared_width // shard.tp)
    if isinstance(cfg, MambaConfig):
        # TP rule (module docstring): d_inner channels split; x_proj rows split (partial sums
        # all-reduced), its R + 2N outputs and dt_proj's input replicated
        return Dims(cfg.d_model, 0, 0, 0, 1, 0, math.ceil(cfg.padded_vocab / shard.tp),
                    moe=False, ssm=True, di=cfg.d_inner // shard.tp, n_state=cfg.d_state,
                    dt_rank=cfg.rank, d_conv=cfg.d_conv)
    raise ValueError(f"{cfg.name}: the cluster model covers Llama-style, Mixtral-style "
                     f"(attention + MoE) and Mamba decoders; {cfg.family} "
                     f"{'with MLA attention ' if isinstance(cfg, MoEConfig) else ''}is not modelled")


def _gemm(name: str, m: int, k: int, n: int, e: int, count: int = 1) -> dict:
    return {"name": name, "kind": "gemm", "m": m, "k": k, "n": n, "count": count,
            "flops": 2.0 * m * k * n * count, "bytes": float(e * (m * k + k * n + m * n) * count)}


def _vec(name: str, flops: float, nbytes: float) -> dict:
    return {"name": name, "kind": "vector", "m": 0, "k": 0, "n": 0, "count": 1,
            "flops": float(flops), "bytes": float(nbytes)}


def _comm(name: str, collective: str, group: str, nbytes: float) -> dict:
    return {"name": name, "kind": "comm", "m": 0, "k": 0, "n": 0, "count": 1, "flops": 0.0,
            "bytes": 0.0, "collective": collective, "group": group, "comm_bytes": float(nbytes)}


def token_gemms(dm: Dims) -> list[tuple[str, int, int]]:
    """(name, K, N) of the GEMMs whose M is the number of tokens (dense part of a layer)."""
    if dm.ssm:
        return [("in_proj", dm.d, 2 * dm.di), ("x_proj", dm.di, dm.dt_rank + 2 * dm.n_state),
                ("dt_proj", dm.dt_rank, dm.di), ("out_proj", dm.di, dm.d)]
    out = [("qkv_proj", dm.d, (dm.h + 2 * dm.kv) * dm.hd), ("o_proj", dm.h * dm.hd, dm.d)]
    if not dm.moe:
        out += [("ffn_gate_up", dm.d, 2 * dm.f), ("ffn_down", dm.f, dm.d)]
    else:
        out.append(("router", dm.d, dm.n_experts))
        if dm.f_shared:
            out += [("shared_gate_up", dm.d, 2 * dm.f_shared), ("shared_down", dm.f_shared, dm.d)]
    return out


def token_vectors(dm: Dims, e: int) -> list[tuple[str, float, float]]:
    """(name, FLOPs per token, bytes per token) of the non-GEMM ops linear in tokens."""
    d, qk = dm.d, (dm.h + dm.kv) * dm.hd
    if dm.ssm:
        di, n = dm.di, dm.n_state
        return [("norm", 4 * d, 2 * d * e), ("conv", 2 * dm.d_conv * di, 2 * di * e),
                ("conv_silu", 5 * di, 2 * di * e), ("softplus", 5 * di, 2 * di * e),
                # discretize exp(delta·A), delta·B·x, then the scan's a·h + b, ·c, accumulate
                ("scan", 3 * di * n + 4 * di * n, (3 * di + 2 * n) * e),
                ("gate", 7 * di, 3 * di * e), ("residual", d, 3 * d * e)]
    out = [("attn_norm", 4 * d, 2 * d * e), ("rope", 3 * qk, 2 * qk * e),
           ("kv_write", 0, 2 * dm.kv * dm.hd * e), ("attn_residual", d, 3 * d * e),
           ("ffn_norm", 4 * d, 2 * d * e), ("ffn_residual", d, 3 * d * e)]
    if not dm.moe:
        out.append(("swiglu_act", 5 * dm.f, 3 * dm.f * e))
    else:
        out += [("router_topk", 5 * dm.n_experts, 2 * dm.n_experts * e),
                ("moe_combine", 2 * dm.top_k * d, (dm.top_k + 1) * d * e)]
        if dm.f_shared:
            out.append(("shared_act", 5 * dm.f_shared, 3 * dm.f_shared * e))
    return out


def layer_ops(cfg: LLMConfig | str, shard: Shard, *, batch: int, q_len: int, ctx_len: int,
              element_bytes: int, expert_tokens: np.ndarray | None = None) -> pd.DataFrame:
    """Forward ops of one layer on one chip for ``batch`` sequences of ``q_len`` new local tokens
    each, attending to ``ctx_len`` keys (after the SP all-gather). ``expert_tokens``: tokens each
    local expert receives (default: perfectly balanced routing)."""
    dm, e = dims_of(cfg, shard), element_bytes
    T = batch * q_len
    rows = [_gemm(n, T, k, nn, e) for n, k, nn in token_gemms(dm)]
    rows += [_vec(n, f * T, b * T) for n, f, b in token_vectors(dm, e)]
    if dm.ssm:      # no attention: the recurrence costs the same per token at any context
        if shard.tp > 1:
            rows += [_comm("x_proj_all_reduce", "all_reduce", "tp",
                           T * (dm.dt_rank + 2 * dm.n_state) * e),
                     _comm("out_all_reduce", "all_reduce", "tp", T * dm.d * e)]
        return pd.DataFrame(rows, columns=COLUMNS)
    if shard.sp > 1:
        rows.append(_comm("kv_all_gather", "all_gather", "sp", shard.sp * T * 2 * dm.kv * dm.hd * e))
    M = dm.g * q_len
    rows += [_gemm("attn_scores", M, dm.hd, ctx_len, e, batch * dm.kv),
             _vec("softmax", 5 * batch * dm.h * q_len * ctx_len, 2 * batch * dm.h * q_len * ctx_len * e),
             _gemm("attn_values", M, ctx_len, dm.hd, e, batch * dm.kv)]
    if shard.tp > 1:
        rows.append(_comm("attn_all_reduce", "all_reduce", "tp", T * dm.d * e))
    if dm.moe:
        if expert_tokens is None:   # balanced: the ep ranks' tokens spread over all experts
            per = math.ceil(T * shard.ep * dm.top_k / dm.n_experts)
            expert_tokens = np.full(dm.experts, per)
        if shard.ep > 1:
            rows.append(_comm("moe_dispatch", "all_to_all", "ep", T * dm.top_k * dm.d * e))
        for t, cnt in zip(*np.unique(np.asarray(expert_tokens), return_counts=True)):
            if t > 0:
                t = int(t)
                rows += [_gemm("expert_gate_up", t, dm.d, 2 * dm.f_exp, e, int(cnt)),
                         _vec("expert_act", 5 * dm.f_exp * t * cnt, 3 * dm.f_exp * e * t * cnt),
                         _gemm("expert_down", t, dm.f_exp, dm.d, e, int(cnt))]
        if shard.ep > 1:
            rows.append(_comm("moe_combine", "all_to_all", "ep", T * dm.top_k * dm.d * e))
    if shard.tp > 1:
        rows.append(_comm("ffn_all_reduce", "all_reduce", "tp", T * dm.d * e))
    return pd.DataFrame(rows, columns=COLUMNS)


def embedding_ops(cfg: LLMConfig | str, shard: Shard, tokens: int, element_bytes: int) -> pd.DataFrame:
    """Embedding lookup of ``tokens`` tokens (a gather: bytes only, plus the index reads)."""
    dm, e = dims_of(cfg, shard), element_bytes
    rows = [_vec("embedding", tokens * dm.d, 2 * tokens * dm.d * e + 4 * tokens)]
    return pd.DataFrame(rows, columns=COLUMNS)


def head_ops(cfg: LLMConfig | str, shard: Shard, tokens: int, element_bytes: int) -> pd.DataFrame:
    """Final norm, LM head (vocab split by TP) and softmax/loss over the local vocab slice."""
    dm, e = dims_of(cfg, shard), element_bytes
    rows = [_vec("final_norm", 4 * tokens * dm.d, 2 * tokens * dm.d * e),
            _gemm("lm_head", tokens, dm.d, dm.vocab, e),
            _vec("logits_softmax", 5 * tokens * dm.vocab, 2 * tokens * dm.vocab * e)]
    return pd.DataFrame(rows, columns=COLUMNS)


def backward_ops(fwd: pd.DataFrame) -> pd.DataFrame:
    """Backward ops of a forward op table (conventions in the module docstring)."""
    rows = []
    for r in fwd.to_dict("records"):
        if r["kind"] == "gemm":
            m, k, n, c = r["m"], r["k"], r["n"], r["count"]
            e = r["bytes"] / (c * (m * k + k * n + m * n))
            rows += [{**r, "name": r["name"] + ".dgrad", "m": m, "k": n, "n": k},
                     {**r, "name": r["name"] + ".wgrad", "m": k, "k": m, "n": n}]
            rows[-2]["bytes"] = rows[-1]["bytes"] = e * c * (m * k + k * n + m * n)
        elif r["kind"] == "vector":
            rows.append({**r, "name": r["name"] + ".bwd", "flops": 2 * r["flops"],
                         "bytes": 2 * r["bytes"]})
        else:
            rows.append({**r, "name": r["name"] + ".bwd",
                         "collective": BACKWARD_COLLECTIVE[r["collective"]]})
    return pd.DataFrame(rows[::-1], columns=COLUMNS)
