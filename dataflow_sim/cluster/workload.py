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

DeepSeek MLA (:mod:`tilewright.models.mla`) is costed in the absorbed form for prefill and
decode (the default ``attn_impl = "absorb"`` of DeepSeek's ``inference/model.py``): per token the
latent projections ``q_a``/``kv_a`` (replicated over TP ranks) and ``q_b``, the query absorption
``W_UK`` (``dn -> r`` per head), the output absorption ``W_UV`` (``r -> dv`` per head) and
``o_proj`` (heads split by TP; each absorption written as one GEMM of the same MACs and weight
bytes); attention as one shared latent "KV head" of ``r + dr`` key and ``r`` value features
attended by all local query heads; the KV cache holds ``r + dr`` elements per token per layer on
every TP rank (the latent is not split by heads). A long prefill costs more attention MACs in this
form than in the naive one (``(r + dr) + r`` vs ``dn + dr + dv`` per head and key), which
servers such as vLLM use for prefill; the dense FFN of the first ``n_dense_layers`` layers is
costed as the MoE FFN (the same active MACs per token for DeepSeek-V3: 9 x 2048 = 18432).

Op costing conventions (stated so they can be checked):

* Attention, unfused (``fused_attention=False``, ArchSpec chips): scores ``Q·Kᵀ`` and ``P·V``
  are GEMMs per KV head (the ``g = H/Hkv`` query heads of a group stacked into M), the softmax
  reads and writes the ``q×c`` score matrix. A causal mask is applied, not skipped: the full
  ``q×c`` rectangle is computed.
* Attention, fused (``fused_attention=True``, GPU presets: FlashAttention-style): one
  ``attention`` op (m = q, k = head dim, n = c, count = batch·heads) of ``4·hd·pairs·batch·H``
  FLOPs with the causal ``pairs`` (:func:`.costs.causal_pairs`; with context parallelism the
  load-balanced share ``q·(c + 1)/2``) and HBM bytes of Q, O (``q·H·hd``) and K, V
  (``c·Hkv·hd``) only. Its backward: 2.5× the FLOPs (:data:`.costs.FA_BACKWARD_FLOPS`), 2× the
  bytes.
* Non-GEMM ops carry FLOPs (elementwise ops counted per output element: RMSNorm 4/elem, rotary
  3, SiLU·mul 5, softmax 5, residual add 1, weighted combine 2·top_k) and bytes (every input read
  and output written once).
* Backward of a GEMM ``A(m×k)·B(k×n)`` is ``dA = dC·Bᵀ`` (m×n×k) plus ``dB = Aᵀ·dC`` (k×m×n);
  backward of a non-GEMM op costs twice its forward FLOPs and bytes. Collectives mirror:
  all-reduce ↔ all-reduce, all-gather ↔ reduce-scatter, all-to-all ↔ all-to-all.

TP communication overlap (:func:`tp_comm_overlap`, Megatron-Core's ``--tp-comm-overlap``,
Transformer Engine userbuffers; it needs sequence parallelism): each TP all-gather is pipelined
with the GEMM that consumes it and each reduce-scatter with the GEMM that produces it, in ``tp``
chunks over the ring (the local chunk first): the GEMM's ``tp`` chunks of ``g/tp`` seconds run
beside the ``tp − 1`` ring steps of ``c/(tp − 1)``, so the exposed communication is
``max(0, c − g·(tp − 1)/tp)`` and the rest, ``c − exposed``, is hidden. Pairs (forward):
attention all-gather ↔ ``qkv_proj``, attention reduce-scatter ↔ ``o_proj``, FFN all-gather ↔
``ffn_gate_up``, FFN reduce-scatter ↔ ``ffn_down``; backward: the mirrored collective ↔ the
same GEMM's ``.dgrad``. The GEMMs are not slowed by the SMs the communication kernels take
(an assumption: TE reserves a few SMs; not modelled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tilewright.models.llm_configs import (DeepSeekConfig, LlamaConfig, LLMConfig, MambaConfig,
                                           MoEConfig, get_config)

from .costs import FA_BACKWARD_FLOPS, causal_pairs

__all__ = ["Shard", "Dims", "dims_of", "layer_ops", "embedding_ops", "head_ops", "backward_ops",
           "token_gemms", "token_vectors", "COLUMNS", "BACKWARD_COLLECTIVE", "TP_OVERLAP_GEMM",
           "tp_overlap_exposed", "tp_comm_overlap"]

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
    mla: bool = False     # DeepSeek MLA attention, costed in the absorbed form (module doc)
    hd_v: int = 0         # attention value width when it differs from hd (MLA: kv_lora_rank)
    q_rank: int = 0       # MLA q_lora_rank (0: no query compression)
    kv_rank: int = 0      # MLA kv_lora_rank r
    dn: int = 0           # MLA qk_nope_head_dim
    dr: int = 0           # MLA qk_rope_head_dim (the shared rotary key)
    dv: int = 0           # MLA v_head_dim


def dims_of(cfg: LLMConfig | str, shard: Shard) -> Dims:
    """Per-chip widths; the caller has validated divisibility (see :mod:`.plan`)."""
    cfg = get_config(cfg) if isinstance(cfg, str) else cfg
    if isinstance(cfg, LlamaConfig):
        hd = cfg.head_dim
        return Dims(cfg.d_model, cfg.n_heads // shard.tp, max(1, cfg.n_kv_heads // shard.tp), hd,
                    cfg.n_heads // cfg.n_kv_heads, cfg.d_ffn // shard.tp,
                    math.ceil(cfg.vocab_size / shard.tp), moe=False)
    if isinstance(cfg, DeepSeekConfig):
        # absorbed MLA: every local query head attends to the one latent "KV head" of
        # r + dr features (keys) and r features (values); latent projections replicated
        h = cfg.n_attn_heads // shard.tp
        return Dims(cfg.d_model, h, 1, cfg.kv_lora_rank + cfg.qk_rope_head_dim, h,
                    cfg.d_dense_ffn // shard.tp, math.ceil(cfg.vocab_size / shard.tp), moe=True,
                    experts=cfg.n_experts // shard.ep, n_experts=cfg.n_experts, top_k=cfg.top_k,
                    f_exp=cfg.d_expert_ffn // shard.tp,
                    f_shared=cfg.n_shared_experts * cfg.d_expert_ffn // shard.tp, mla=True,
                    hd_v=cfg.kv_lora_rank, q_rank=cfg.q_lora_rank, kv_rank=cfg.kv_lora_rank,
                    dn=cfg.qk_nope_head_dim, dr=cfg.qk_rope_head_dim, dv=cfg.v_head_dim)
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


#: token-wise ops Megatron sequence parallelism splits over the TP ranks
_SEQ_SPLIT = {"attn_norm", "ffn_norm", "attn_residual", "ffn_residual"}


def _tp_reduce(block: str, nbytes: float, seq_parallel: bool) -> list[dict]:
    """The TP collective(s) closing ``block``: one all-reduce, or with sequence parallelism an
    all-gather (entering the block) and a reduce-scatter (leaving it) of the same buffer."""
    if not seq_parallel:
        return [_comm(f"{block}_all_reduce", "all_reduce", "tp", nbytes)]
    return [_comm(f"{block}_all_gather", "all_gather", "tp", nbytes),
            _comm(f"{block}_reduce_scatter", "reduce_scatter", "tp", nbytes)]


#: the GEMM each sequence-parallel TP collective is pipelined with (module docstring)
TP_OVERLAP_GEMM = {"attn_all_gather": "qkv_proj", "attn_reduce_scatter": "o_proj",
                   "ffn_all_gather": "ffn_gate_up", "ffn_reduce_scatter": "ffn_down"}


def tp_overlap_exposed(comm_s, gemm_s, tp: int):
    """Exposed seconds of a TP collective of ``comm_s`` pipelined in ``tp`` ring chunks with a
    GEMM of ``gemm_s`` (module docstring): ``max(0, c − g·(tp − 1)/tp)``."""
    return np.maximum(0.0, np.asarray(comm_s, float) - np.asarray(gemm_s, float) * (tp - 1) / tp)


def tp_comm_overlap(table: pd.DataFrame, tp: int) -> np.ndarray:
    """Hidden seconds of each row of a costed op table (``name``, ``phase``, ``seconds``) under
    TP communication overlap: for the TP collectives of :data:`TP_OVERLAP_GEMM` (backward:
    ``<name>.bwd`` with ``<gemm>.dgrad``) ``c − exposed``; 0 for every other row. A collective
    whose GEMM is not in the table raises ValueError (never silently left exposed)."""
    hidden = np.zeros(len(table))
    secs = dict(zip(zip(table["phase"], table["name"]), table["seconds"]))
    for i, (phase, name, group, c) in enumerate(zip(table["phase"], table["name"],
                                                    table["group"], table["seconds"])):
        if group != "tp":
            continue
        base = name[:-4] if name.endswith(".bwd") else name
        gemm = TP_OVERLAP_GEMM.get(base)
        if gemm is None:
            raise ValueError(f"TP collective {name}: no GEMM to overlap it with (tp_comm_overlap "
                             "covers the sequence-parallel all-gathers and reduce-scatters of "
                             "Llama-style layers)")
        g = secs.get((phase, gemm + (".dgrad" if phase == "backward" else "")))
        if g is None:
            raise ValueError(f"TP collective {name}: the {phase} op table has no GEMM {gemm}")
        hidden[i] = c - float(tp_overlap_exposed(c, g, tp))
    return hidden


def token_gemms(dm: Dims) -> list[tuple[str, int, int]]:
    """(name, K, N) of the GEMMs whose M is the number of tokens (dense part of a layer)."""
    if dm.ssm:
        return [("in_proj", dm.d, 2 * dm.di), ("x_proj", dm.di, dm.dt_rank + 2 * dm.n_state),
                ("dt_proj", dm.dt_rank, dm.di), ("out_proj", dm.di, dm.d)]
    if dm.mla:      # per-head absorptions written as one GEMM of equal MACs and weight bytes
        q = ([("q_a_proj", dm.d, dm.q_rank), ("q_b_proj", dm.q_rank, dm.h * (dm.dn + dm.dr))]
             if dm.q_rank else [("q_proj", dm.d, dm.h * (dm.dn + dm.dr))])
        out = q + [("kv_a_proj", dm.d, dm.kv_rank + dm.dr), ("q_absorb", dm.dn, dm.h * dm.kv_rank),
                   ("v_absorb", dm.kv_rank, dm.h * dm.dv), ("o_proj", dm.h * dm.dv, dm.d)]
    else:
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
    kv_elems = 2 * dm.kv * dm.hd
    if dm.mla:      # rotary on the query heads' dr features and the shared key; latent norms
        qk, kv_elems = (dm.h + 1) * dm.dr, dm.kv_rank + dm.dr
    out = [("attn_norm", 4 * d, 2 * d * e), ("rope", 3 * qk, 2 * qk * e),
           ("kv_write", 0, kv_elems * e), ("attn_residual", d, 3 * d * e),
           ("ffn_norm", 4 * d, 2 * d * e), ("ffn_residual", d, 3 * d * e)]
    if dm.mla:
        lat = dm.q_rank + dm.kv_rank
        out.append(("latent_norms", 4 * lat, 2 * lat * e))
    if not dm.moe:
        out.append(("swiglu_act", 5 * dm.f, 3 * dm.f * e))
    else:
        out += [("router_topk", 5 * dm.n_experts, 2 * dm.n_experts * e),
                ("moe_combine", 2 * dm.top_k * d, (dm.top_k + 1) * d * e)]
        if dm.f_shared:
            out.append(("shared_act", 5 * dm.f_shared, 3 * dm.f_shared * e))
    return out


def layer_ops(cfg: LLMConfig | str, shard: Shard, *, batch: int, q_len: int, ctx_len: int,
              element_bytes: int, expert_tokens: np.ndarray | None = None,
              fused_attention: bool = False, balanced_context: bool = False,
              seq_parallel: bool = False) -> pd.DataFrame:
    """Forward ops of one layer on one chip for ``batch`` sequences of ``q_len`` new local tokens
    each, attending to ``ctx_len`` keys (after the SP all-gather). ``expert_tokens``: tokens each
    local expert receives (default: perfectly balanced routing). ``fused_attention``: one
    FlashAttention-style op with the causal half (module docstring); ``balanced_context``: the
    q local queries are a load-balanced share of a causal sequence of ``ctx_len`` (context
    parallelism) rather than its last q positions. ``seq_parallel`` (Megatron sequence
    parallelism, tp > 1): the norms and residual adds run on T/tp tokens, and each TP
    all-reduce becomes an all-gather before and a reduce-scatter after its block (the same
    ring volume)."""
    dm, e = dims_of(cfg, shard), element_bytes
    T = batch * q_len
    rows = [_gemm(n, T, k, nn, e) for n, k, nn in token_gemms(dm)]
    split = shard.tp if seq_parallel else 1
    rows += [_vec(n, f * T / (split if n in _SEQ_SPLIT else 1),
                  b * T / (split if n in _SEQ_SPLIT else 1)) for n, f, b in token_vectors(dm, e)]
    if dm.ssm:      # no attention: the recurrence costs the same per token at any context
        if shard.tp > 1:
            rows += [_comm("x_proj_all_reduce", "all_reduce", "tp",
                           T * (dm.dt_rank + 2 * dm.n_state) * e),
                     _comm("out_all_reduce", "all_reduce", "tp", T * dm.d * e)]
        return pd.DataFrame(rows, columns=COLUMNS)
    if shard.sp > 1:
        rows.append(_comm("kv_all_gather", "all_gather", "sp", shard.sp * T * 2 * dm.kv * dm.hd * e))
    M = dm.g * q_len
    if fused_attention:
        pairs = q_len * (ctx_len + 1) / 2 if balanced_context else float(
            causal_pairs(q_len, ctx_len))
        hv = dm.hd_v or dm.hd                       # MLA: values r wide, keys r + dr
        kv_read = ctx_len * dm.kv * (dm.hd if dm.hd_v else 2 * dm.hd)   # latent: read once
        rows.append({"name": "attention", "kind": "attention", "m": q_len, "k": dm.hd,
                     "n": ctx_len, "count": batch * dm.h,
                     "flops": 2.0 * (dm.hd + hv) * pairs * batch * dm.h,
                     "bytes": float(e * batch * (q_len * dm.h * (dm.hd + hv) + kv_read))})
    else:
        rows += [_gemm("attn_scores", M, dm.hd, ctx_len, e, batch * dm.kv),
                 _vec("softmax", 5 * batch * dm.h * q_len * ctx_len,
                      2 * batch * dm.h * q_len * ctx_len * e),
                 _gemm("attn_values", M, ctx_len, dm.hd_v or dm.hd, e, batch * dm.kv)]
    if shard.tp > 1:
        rows += _tp_reduce("attn", T * dm.d * e, seq_parallel)
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
        rows += _tp_reduce("ffn", T * dm.d * e, seq_parallel)
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
        elif r["kind"] == "attention":
            rows.append({**r, "name": r["name"] + ".bwd", "flops": FA_BACKWARD_FLOPS * r["flops"],
                         "bytes": 2 * r["bytes"]})
        else:
            rows.append({**r, "name": r["name"] + ".bwd",
                         "collective": BACKWARD_COLLECTIVE[r["collective"]]})
    return pd.DataFrame(rows[::-1], columns=COLUMNS)
