"""Multi-head Latent Attention (MLA) of DeepSeek-V2/V3, with the YaRN rotary scaling they use.

Written from the equations of the DeepSeek-V2 paper (arXiv 2405.04434, section 2.1) and the
structure of DeepSeek's public ``inference/model.py`` (github.com/deepseek-ai/DeepSeek-V3): our
own code, explicit tensor ops only (``matmul``, ``softmax``, ``arange`` masks, rotary as real
multiply-adds) so ``torch.export`` captures a graph the compiler lowers op by op.

Per token ``x`` [D]:

* query: ``q = W_qb · RMSNorm(W_qa · x)`` (``q_lora_rank > 0``; else ``q = W_q · x``), split per
  head into ``q_nope`` [dn] and ``q_pe`` [dr]; rotary on ``q_pe``;
* latent: ``[c_kv, k_pe] = W_kva · x``; ``c_kv`` [r] is RMS-normed, ``k_pe`` [dr] gets rotary
  and is shared by all heads (the decoupled RoPE key);
* naive form: ``[k_nope_h, v_h] = W_kvb[h] · c_kv``; ``k_h = [k_nope_h, k_pe]``,
  ``q_h = [q_nope_h, q_pe_h]``; ordinary causal multi-head attention; ``out = W_o · concat_h o_h``;
* absorbed form (same result): ``W_UK[h]`` = the ``k_nope`` rows of ``W_kvb[h]`` is folded into
  the query, ``q_lat_h = W_UK[h]ᵀ · q_nope_h`` [r]; scores ``q_lat_h · c_kv_t + q_pe_h · k_pe_t``
  against the latent cache; ``o_lat_h = Σ_t p_t c_kv_t`` [r]; ``W_UV[h]`` (the ``v`` rows) is
  folded into the output, ``o_h = W_UV[h] · o_lat_h`` [dv].

The cache is the latent one: ``c_kv`` [B, T, r] (normed) and ``k_pe`` [B, T, dr] (rotated) —
``r + dr`` elements per token per layer (576 for DeepSeek-V3).

Softmax scale: ``(dn + dr) ** -0.5``, times ``mscale ** 2`` with
``mscale = 0.1 · mscale_all_dim · ln(factor) + 1`` when YaRN scaling is on (the reference
applies it when ``max_seq_len > original_max_position_embeddings``, as we do).

Shape letters: ``B`` batch, ``S`` new tokens, ``T`` cached tokens, ``D`` d_model, ``H`` heads,
``r`` kv_lora_rank, ``dn`` qk_nope_head_dim, ``dr`` qk_rope_head_dim, ``dv`` v_head_dim.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from tilewright.models.llm_shapes import YarnScaling
from tilewright.models.transformer import RMSNorm, apply_rope, causal_mask

__all__ = ["YarnScaling", "yarn_inv_freq", "yarn_mscale", "mla_rope_tables", "MLAttention"]


def yarn_mscale(factor: float, mscale: float) -> float:
    """YaRN attention-temperature factor ``0.1 · mscale · ln(factor) + 1`` (1 for factor <= 1)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_inv_freq(dim: int, theta: float, yarn: YarnScaling | None, max_seq_len: int) -> Tensor:
    """float64 [dim / 2] rotary inverse frequencies (radians per position). Without YaRN (or when
    ``max_seq_len`` does not exceed the original context) ``theta ** (-2i / dim)``; with it, the
    dimensions rotating fewer than ``beta_slow`` times over the original context are divided by
    ``factor``, those rotating more than ``beta_fast`` times are kept, with a linear ramp
    between (correction dims floored/ceiled, clamped to ``[0, dim - 1]``)."""
    inv = theta ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    if yarn is None or max_seq_len <= yarn.original_max_position_embeddings:
        return inv
    orig = yarn.original_max_position_embeddings

    def corr_dim(rotations: float) -> float:
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(corr_dim(yarn.beta_fast)), 0)
    high = min(math.ceil(corr_dim(yarn.beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp                    # 1: high-frequency dims kept; 0: interpolated by factor
    return inv / yarn.factor * (1 - keep) + inv * keep


def mla_rope_tables(dim: int, max_seq_len: int, theta: float,
                    yarn: YarnScaling | None) -> tuple[Tensor, Tensor]:
    """``(cos, sin)`` float32 [max_seq_len, dim / 2] of :func:`yarn_inv_freq` (no cos/sin
    magnitude scaling: DeepSeek-V3's ``mscale == mscale_all_dim`` makes HF's factor 1)."""
    if dim % 2:
        raise ValueError(f"rotary embedding needs an even qk_rope_head_dim, got {dim}")
    angle = torch.arange(max_seq_len, dtype=torch.float64)[:, None] \
        * yarn_inv_freq(dim, theta, yarn, max_seq_len)[None, :]
    return torch.cos(angle).float(), torch.sin(angle).float()


class MLAttention(nn.Module):
    """Causal Multi-head Latent Attention (module doc). Parameter names follow DeepSeek's
    reference: ``wq`` or ``wq_a``/``q_norm``/``wq_b``, ``wkv_a``, ``kv_norm``, ``wkv_b``, ``wo``
    (all without bias).

    ``forward(x)`` (no cache) runs the naive form; ``forward(x, c_kv, k_pe)`` (a cache of
    ``T >= 0`` tokens) the absorbed form. Both return ``(out [B, S, D], c_kv [B, T+S, r],
    k_pe [B, T+S, dr])``: the latent cache extended by the new tokens.
    """

    def __init__(self, d_model: int, n_heads: int, *, q_lora_rank: int, kv_lora_rank: int,
                 qk_nope_head_dim: int, qk_rope_head_dim: int, v_head_dim: int,
                 rope_theta: float, max_seq_len: int, norm_eps: float = 1e-6,
                 yarn: YarnScaling | None = None) -> None:
        super().__init__()
        for k, v in (("d_model", d_model), ("n_heads", n_heads), ("kv_lora_rank", kv_lora_rank),
                     ("qk_nope_head_dim", qk_nope_head_dim),
                     ("qk_rope_head_dim", qk_rope_head_dim), ("v_head_dim", v_head_dim),
                     ("max_seq_len", max_seq_len)):
            if v < 1:
                raise ValueError(f"MLA {k} must be >= 1, got {v}")
        if q_lora_rank < 0:
            raise ValueError(f"MLA q_lora_rank must be >= 0 (0: no query compression), got "
                             f"{q_lora_rank}")
        self.n_heads, self.q_lora_rank, self.kv_lora_rank = n_heads, q_lora_rank, kv_lora_rank
        self.dn, self.dr, self.dv = qk_nope_head_dim, qk_rope_head_dim, v_head_dim
        self.max_seq_len = max_seq_len
        qk = qk_nope_head_dim + qk_rope_head_dim
        if q_lora_rank:
            self.wq_a = nn.Linear(d_model, q_lora_rank, bias=False)
            self.q_norm = RMSNorm(q_lora_rank, eps=norm_eps)
            self.wq_b = nn.Linear(q_lora_rank, n_heads * qk, bias=False)
        else:
            self.wq = nn.Linear(d_model, n_heads * qk, bias=False)
        self.wkv_a = nn.Linear(d_model, kv_lora_rank + qk_rope_head_dim, bias=False)
        self.kv_norm = RMSNorm(kv_lora_rank, eps=norm_eps)
        self.wkv_b = nn.Linear(kv_lora_rank, n_heads * (qk_nope_head_dim + v_head_dim),
                               bias=False)
        self.wo = nn.Linear(n_heads * v_head_dim, d_model, bias=False)
        self.softmax_scale = qk ** -0.5
        if yarn is not None and max_seq_len > yarn.original_max_position_embeddings:
            self.softmax_scale *= yarn_mscale(yarn.factor, yarn.mscale_all_dim) ** 2
        cos, sin = mla_rope_tables(qk_rope_head_dim, max_seq_len, rope_theta, yarn)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def _project(self, x: Tensor, t: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """New tokens at positions ``t .. t+S-1`` -> ``q_nope [B,S,H,dn]``, ``q_pe [B,S,H,dr]``
        (rotated), ``c_kv [B,S,r]`` (normed), ``k_pe [B,S,dr]`` (rotated)."""
        b, s, _ = x.shape
        if t + s > self.max_seq_len:
            raise ValueError(f"{t} cached + {s} new tokens exceed max_seq_len {self.max_seq_len}")
        q = self.wq_b(self.q_norm(self.wq_a(x))) if self.q_lora_rank else self.wq(x)
        q = q.view(b, s, self.n_heads, self.dn + self.dr)
        q_nope, q_pe = q[..., :self.dn], q[..., self.dn:]
        kv = self.wkv_a(x)
        c_kv, k_pe = self.kv_norm(kv[..., :self.kv_lora_rank]), kv[..., self.kv_lora_rank:]
        cos, sin = self.rope_cos[t:t + s], self.rope_sin[t:t + s]
        q_pe = apply_rope(q_pe, cos, sin)
        k_pe = apply_rope(k_pe.unsqueeze(2), cos, sin).squeeze(2)
        return q_nope, q_pe, c_kv, k_pe

    def _probs(self, scores: Tensor, s: int, t: int) -> Tensor:
        """Scaled, causally masked softmax over the last axis of ``scores`` [B, H, S, T+S]."""
        scores = scores * self.softmax_scale
        scores = scores.masked_fill(causal_mask(s, t, scores.device), float("-inf"))
        return torch.softmax(scores, dim=-1)

    def naive(self, x: Tensor, c_kv: Tensor | None = None, k_pe: Tensor | None = None
              ) -> tuple[Tensor, Tensor, Tensor]:
        """Naive form: per-head keys and values decompressed from the latent (module doc)."""
        b, s, _ = x.shape
        t = 0 if c_kv is None else c_kv.shape[1]
        q_nope, q_pe, c_new, pe_new = self._project(x, t)
        if c_kv is not None:
            c_new, pe_new = torch.cat((c_kv, c_new), dim=1), torch.cat((k_pe, pe_new), dim=1)
        h, n = self.n_heads, t + s
        kv = self.wkv_b(c_new).view(b, n, h, self.dn + self.dv)
        k_nope, v = kv[..., :self.dn].transpose(1, 2), kv[..., self.dn:].transpose(1, 2)
        # scores = q_nope·k_nope + q_pe·k_pe (the concatenated head of dn + dr features)
        scores = torch.matmul(q_nope.transpose(1, 2), k_nope.transpose(-1, -2)) \
            + torch.matmul(q_pe.transpose(1, 2), pe_new.unsqueeze(1).transpose(-1, -2))
        o = torch.matmul(self._probs(scores, s, t), v)                 # [B, H, S, dv]
        return self.wo(o.transpose(1, 2).reshape(b, s, h * self.dv)), c_new, pe_new

    def absorbed(self, x: Tensor, c_kv: Tensor | None = None, k_pe: Tensor | None = None
                 ) -> tuple[Tensor, Tensor, Tensor]:
        """Absorbed form: attention over the latent cache, ``W_UK`` in the query and ``W_UV``
        in the output (module doc)."""
        b, s, _ = x.shape
        t = 0 if c_kv is None else c_kv.shape[1]
        q_nope, q_pe, c_new, pe_new = self._project(x, t)
        if c_kv is not None:
            c_new, pe_new = torch.cat((c_kv, c_new), dim=1), torch.cat((k_pe, pe_new), dim=1)
        h, r = self.n_heads, self.kv_lora_rank
        w = self.wkv_b.weight.view(h, self.dn + self.dv, r)
        w_uk, w_uv = w[:, :self.dn], w[:, self.dn:]                    # [H, dn, r], [H, dv, r]
        q_lat = torch.matmul(q_nope.transpose(1, 2), w_uk)              # [B, H, S, r]
        scores = torch.matmul(q_lat, c_new.unsqueeze(1).transpose(-1, -2)) \
            + torch.matmul(q_pe.transpose(1, 2), pe_new.unsqueeze(1).transpose(-1, -2))
        o_lat = torch.matmul(self._probs(scores, s, t), c_new.unsqueeze(1))  # [B, H, S, r]
        o = torch.matmul(o_lat, w_uv.transpose(-1, -2))                 # [B, H, S, dv]
        return self.wo(o.transpose(1, 2).reshape(b, s, h * self.dv)), c_new, pe_new

    def forward(self, x: Tensor, c_kv: Tensor | None = None, k_pe: Tensor | None = None
                ) -> tuple[Tensor, Tensor, Tensor]:
        """``x`` [B, S, D]; latent cache ``c_kv`` [B, T, r], ``k_pe`` [B, T, dr] or None.
        No cache: naive form (prefill); a cache: absorbed form (decode)."""
        if c_kv is None:
            return self.naive(x)
        return self.absorbed(x, c_kv, k_pe)
