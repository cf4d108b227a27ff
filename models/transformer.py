"""Llama-style decoder layer: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU.

Everything is written with explicit tensor ops (``matmul``, ``softmax``, a causal mask made from
``arange`` comparisons, rotary embedding as real multiply-adds on a precomputed cos/sin table) so
``torch.export`` captures a graph the compiler can lower op by op; no fused attention kernel
(``F.scaled_dot_product_attention``) and no complex dtypes are used.

Shape letters used throughout: ``B`` batch, ``S`` new tokens in this call, ``T`` tokens already in
the KV cache, ``D`` d_model, ``H`` query heads, ``Hkv`` key/value heads, ``hd`` head_dim,
``F`` feed-forward width. All tensors are float32 unless stated otherwise.

Parameters are created uninitialized and filled by :func:`seeded_init_` from a seed; a module
built under ``torch.device("meta")`` holds no storage at all (for counting real-shape models).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

__all__ = ["RMSNorm", "SwiGLU", "rope_tables", "apply_rope", "causal_mask",
           "GroupedQueryAttention", "DecoderLayer", "CausalLM", "seeded_init_"]


class RMSNorm(nn.Module):
    """``y = x / sqrt(mean(x**2, last dim) + eps) * weight`` over the last dim (``d`` features)."""

    def __init__(self, d: int, *, eps: float = 1e-5) -> None:
        super().__init__()
        if d < 1:
            raise ValueError(f"RMSNorm width must be >= 1, got {d}")
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: Tensor) -> Tensor:
        """``x``: [..., d] -> [..., d]."""
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(nn.Module):
    """Gated feed-forward ``w2(silu(w1 x) * w3 x)``, no bias unless ``bias`` (Llama naming: w1
    gate, w3 up, w2 down).

    ``d_model`` -> ``d_ffn`` -> ``d_model`` features.
    """

    def __init__(self, d_model: int, d_ffn: int, *, bias: bool = False) -> None:
        super().__init__()
        if d_model < 1 or d_ffn < 1:
            raise ValueError(f"SwiGLU widths must be >= 1, got d_model={d_model}, d_ffn={d_ffn}")
        self.w1 = nn.Linear(d_model, d_ffn, bias=bias)
        self.w3 = nn.Linear(d_model, d_ffn, bias=bias)
        self.w2 = nn.Linear(d_ffn, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """``x``: [..., D] -> [..., D]."""
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


#: the ``rope_scaling`` kinds :func:`scaled_inv_freq` implements (HF ``rope_type``)
ROPE_SCALINGS = ("linear", "llama3")


def scaled_inv_freq(inv_freq: Tensor, scaling: dict | None) -> Tensor:
    """Rotary frequencies (radians per position) after HF ``rope_scaling``: ``linear`` divides
    every frequency by ``factor``; ``llama3`` (Llama 3.1) divides the low frequencies (wavelength
    above ``original_max_position_embeddings / low_freq_factor``) by ``factor``, keeps the high
    ones (wavelength below ``.../high_freq_factor``) and blends linearly in between
    (https://github.com/meta-llama/llama-models, ``apply_scaling``)."""
    if scaling is None:
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type"))
    factor = float(scaling["factor"])
    if kind == "linear":
        return inv_freq / factor
    if kind != "llama3":
        raise ValueError(f"rope_scaling type {kind!r}: accepted {', '.join(ROPE_SCALINGS)}")
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    old = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(medium, blended, scaled)


def rope_tables(head_dim: int, max_seq_len: int, theta: float,
                scaling: dict | None = None) -> tuple[Tensor, Tensor]:
    """``(cos, sin)``, each float32 [max_seq_len, head_dim // 2]: entry ``[p, i]`` is the cos/sin of
    angle ``p * f_i`` radians, ``f_i = theta ** (-2 i / head_dim)`` after ``scaling``
    (:func:`scaled_inv_freq`); computed in float64, then rounded."""
    if head_dim % 2:
        raise ValueError(f"rotary embedding needs an even head_dim, got {head_dim}")
    inv_freq = scaled_inv_freq(
        theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim), scaling)
    angle = torch.arange(max_seq_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(angle).float(), torch.sin(angle).float()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate consecutive feature pairs ``(x[2i], x[2i+1])`` of each head by the position's angle
    (Meta's Llama convention: the pair, read as a complex number, times ``cos + i sin``).

    ``x``: [B, S, heads, hd]; ``cos``/``sin``: [S, hd/2] (rows for the S positions)
    -> [B, S, heads, hd].
    """
    pairs = x.unflatten(-1, (x.shape[-1] // 2, 2))
    x0, x1 = pairs[..., 0], pairs[..., 1]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


def causal_mask(n_new: int, n_past: int, device: torch.device | None = None) -> Tensor:
    """bool [n_new, n_past + n_new], True where query ``i`` (absolute position ``n_past + i``) must
    NOT see key ``j`` (i.e. ``j > n_past + i``)."""
    q_pos = torch.arange(n_new, device=device)[:, None] + n_past
    k_pos = torch.arange(n_past + n_new, device=device)[None, :]
    return k_pos > q_pos


class GroupedQueryAttention(nn.Module):
    """Causal multi-head attention with ``n_kv_heads`` key/value heads shared by groups of
    ``n_heads // n_kv_heads`` query heads (MHA when equal), rotary embeddings on q and k.

    Query head ``h`` uses kv head ``h // (n_heads // n_kv_heads)`` (same as ``repeat_interleave``
    of the kv heads). Projections have no bias unless ``qkv_bias`` / ``o_bias``; ``qk_norm``
    applies an RMSNorm over ``head_dim`` (one weight shared by the heads) to q and k before the
    rotary embedding (Qwen3); ``rope_scaling`` as :func:`rope_tables`; ``rope=False`` leaves
    positions out (Jamba). ``max_seq_len`` bounds past + new tokens.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, *, rope_theta: float,
                 max_seq_len: int, head_dim: int | None = None, qkv_bias: bool = False,
                 o_bias: bool = False, qk_norm: bool = False, norm_eps: float = 1e-5,
                 rope_scaling: dict | None = None, rope: bool = True) -> None:
        super().__init__()
        if n_heads < 1 or n_kv_heads < 1 or n_heads % n_kv_heads:
            raise ValueError(f"n_heads ({n_heads}) must be a positive multiple of n_kv_heads "
                             f"({n_kv_heads})")
        if head_dim is None:
            if d_model % n_heads:
                raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
            head_dim = d_model // n_heads
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.max_seq_len = max_seq_len
        self.wq = nn.Linear(d_model, n_heads * head_dim, bias=qkv_bias)
        self.wk = nn.Linear(d_model, n_kv_heads * head_dim, bias=qkv_bias)
        self.wv = nn.Linear(d_model, n_kv_heads * head_dim, bias=qkv_bias)
        self.wo = nn.Linear(n_heads * head_dim, d_model, bias=o_bias)
        self.q_norm = RMSNorm(head_dim, eps=norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(head_dim, eps=norm_eps) if qk_norm else None
        self.rope = rope
        if rope:
            cos, sin = rope_tables(head_dim, max_seq_len, rope_theta, rope_scaling)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, x: Tensor, past_k: Tensor | None = None,
                past_v: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``x``: [B, S, D] new tokens at positions ``T .. T+S-1``; ``past_k``/``past_v``:
        [B, Hkv, T, hd] cache (rotary already applied to k) or None for T = 0.

        Returns ``(out [B, S, D], k [B, Hkv, T+S, hd], v [B, Hkv, T+S, hd])`` — the cache extended
        by the new tokens.
        """
        b, s, _ = x.shape
        t = 0 if past_k is None else past_k.shape[2]
        if t + s > self.max_seq_len:
            raise ValueError(f"{t} cached + {s} new tokens exceed max_seq_len {self.max_seq_len}")
        h, hkv, hd = self.n_heads, self.n_kv_heads, self.head_dim
        q = self.wq(x).view(b, s, h, hd)
        k = self.wk(x).view(b, s, hkv, hd)
        v = self.wv(x).view(b, s, hkv, hd)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope:
            cos, sin = self.rope_cos[t:t + s], self.rope_sin[t:t + s]
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k, v = k.transpose(1, 2), v.transpose(1, 2)                    # [B, Hkv, S, hd]
        if past_k is not None:
            k = torch.cat((past_k, k), dim=2)                           # [B, Hkv, T+S, hd]
            v = torch.cat((past_v, v), dim=2)
        # group query heads by the kv head they share: [B, Hkv, rep, S, hd]
        qg = q.view(b, s, hkv, h // hkv, hd).permute(0, 2, 3, 1, 4)
        scores = torch.matmul(qg, k.unsqueeze(2).transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        scores = scores.masked_fill(causal_mask(s, t, x.device), float("-inf"))
        probs = torch.softmax(scores, dim=-1)                           # [B, Hkv, rep, S, T+S]
        o = torch.matmul(probs, v.unsqueeze(2))                         # [B, Hkv, rep, S, hd]
        o = o.permute(0, 3, 1, 2, 4).reshape(b, s, h * hd)
        return self.wo(o), k, v


class DecoderLayer(nn.Module):
    """Pre-norm decoder layer ``h = x + attn(norm(x)); y = h + ffn(norm(h))``.

    ``ffn`` defaults to :class:`SwiGLU` (``d_ffn`` wide); pass another module (e.g. a MoE layer)
    to replace it — if it returns a tuple, its first element is the output. ``attn_kwargs``
    (``head_dim``, ``qkv_bias``, ``o_bias``, ``qk_norm``, ``rope_scaling``) go to
    :class:`GroupedQueryAttention`; ``mlp_bias`` to the default :class:`SwiGLU`.

    Prefill: ``layer(x)``; decode: ``layer(x_new, k_cache, v_cache)``; both return
    ``(y [B, S, D], k_cache [B, Hkv, T+S, hd], v_cache [B, Hkv, T+S, hd])``.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, d_ffn: int, *,
                 rope_theta: float, norm_eps: float = 1e-5, max_seq_len: int = 8192,
                 ffn: nn.Module | None = None, mlp_bias: bool = False,
                 **attn_kwargs) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(d_model, eps=norm_eps)
        self.attn = GroupedQueryAttention(d_model, n_heads, n_kv_heads, rope_theta=rope_theta,
                                          max_seq_len=max_seq_len, norm_eps=norm_eps,
                                          **attn_kwargs)
        self.ffn_norm = RMSNorm(d_model, eps=norm_eps)
        self.ffn = ffn if ffn is not None else SwiGLU(d_model, d_ffn, bias=mlp_bias)

    def forward(self, x: Tensor, k_cache: Tensor | None = None,
                v_cache: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``x``: [B, S, D]; caches [B, Hkv, T, hd] or None (prefill)
        -> ``(y, k_cache, v_cache)`` followed by the FFN's extra outputs when it returns a tuple
        (an MoE layer's expert ``counts``)."""
        a, k, v = self.attn(self.attn_norm(x), k_cache, v_cache)
        h = x + a
        f = self.ffn(self.ffn_norm(h))
        extra: tuple = ()
        if isinstance(f, tuple):
            f, extra = f[0], tuple(f[1:])
        return (h + f, k, v, *extra)


class CausalLM(nn.Module):
    """Token embedding -> ``layers`` -> final RMSNorm -> LM head (full model, for parameter
    counting and end-to-end runs). Each layer maps [B, S, D] to [B, S, D] or a tuple whose first
    element is that. ``tie_embeddings`` reuses the embedding matrix as the LM head."""

    def __init__(self, vocab_size: int, d_model: int, n_layers: int,
                 make_layer: Callable[[], nn.Module], *, norm_eps: float = 1e-5,
                 tie_embeddings: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(make_layer() for _ in range(n_layers))
        self.norm = RMSNorm(d_model, eps=norm_eps)
        self.lm_head = None if tie_embeddings else nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, tokens: Tensor) -> Tensor:
        """``tokens``: int64 [B, S] -> logits float [B, S, vocab]."""
        h = self.embed(tokens)
        for layer in self.layers:
            out = layer(h)
            h = out[0] if isinstance(out, tuple) else out
        h = self.norm(h)
        if self.lm_head is None:
            return h @ self.embed.weight.t()
        return self.lm_head(h)


def _uniform_(p: Tensor, bound: float, gen: torch.Generator) -> None:
    p.uniform_(-bound, bound, generator=gen)


def seeded_init_(module: nn.Module, seed: int) -> nn.Module:
    """Fill every parameter of ``module`` deterministically from ``seed`` (independent of the
    global RNG) and return it; a module on the meta device is returned untouched.

    ``nn.Linear``/``nn.Conv1d``: uniform ±1/sqrt(fan_in) (torch's default distribution);
    ``nn.Embedding``: N(0, 1); :class:`RMSNorm` weight: 1 + U(-0.1, 0.1) (not exactly 1, so tests
    see the scale). Then any module with an ``_init_extra(gen)`` method (visited in
    ``module.modules()`` order) fills its own special parameters (MoE expert stacks, Mamba
    ``A_log``, ``D``, ``dt_proj.bias``).
    """
    if any(p.is_meta for p in module.parameters()):
        return module
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.Linear):
                bound = 1.0 / math.sqrt(m.in_features)
                _uniform_(m.weight, bound, gen)
                if m.bias is not None:
                    _uniform_(m.bias, bound, gen)
            elif isinstance(m, nn.Conv1d):
                bound = 1.0 / math.sqrt(m.weight[0].numel())
                _uniform_(m.weight, bound, gen)
                if m.bias is not None:
                    _uniform_(m.bias, bound, gen)
            elif isinstance(m, nn.Embedding):
                m.weight.normal_(0.0, 1.0, generator=gen)
            elif isinstance(m, RMSNorm):
                m.weight.uniform_(0.9, 1.1, generator=gen)
        for m in module.modules():
            extra = getattr(m, "_init_extra", None)
            if callable(extra):
                extra(gen)
    return module
