"""Named LLM configs with published shapes (plus tiny variants for tests), as plain dataclasses.

Torch-free: the shapes the mesh partitioner and the cluster model read (:data:`LLM_CONFIGS`,
:func:`get_config`, :func:`param_count`). Building the modules from them is
:mod:`tilewright.models.llm_configs` (imports torch), which re-exports everything here.

Sources (HF ``config.json``): meta-llama/Meta-Llama-3-8B, meta-llama/Meta-Llama-3-70B,
mistralai/Mixtral-8x7B-v0.1, deepseek-ai/DeepSeek-V3, state-spaces/mamba-130m and mamba-2.8b.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, Union

from tilewright.errors import UserError

__all__ = ["builtin_names", "ModelInputError", "LlamaConfig", "MoEConfig", "MambaConfig",
           "Mamba2Config", "HybridConfig", "layer_kinds", "unmodeled_fields", "FILE_CONFIGS",
           "LLMConfig", "LLM_CONFIGS", "get_config", "param_count", "Phase", "YarnScaling",
           "DeepSeekConfig"]

Phase = Literal["prefill", "decode"]


class ModelInputError(UserError, ValueError):
    """A model, or an input to it, that cannot be given: an unknown name, a phase, a sequence
    beyond the config's context (``max_seq_len``), or a Python factory / ONNX file
    (:mod:`tilewright.models.user_module`) that gives no model. The message names the limit, or
    the file and the factory or op."""


@dataclass(frozen=True, kw_only=True)
class AttentionFields:
    """The Llama-style attention fields a Hugging Face config may set (dense and MoE configs
    share them; keyword-only, after each config's own fields)."""

    d_head: int | None = None
    """HF ``head_dim``; None = d_model // n_heads"""
    qkv_bias: bool = False
    """bias on the q/k/v projections (HF ``attention_bias``; Qwen2 always)"""
    o_bias: bool = False
    """bias on the output projection (HF Llama ``attention_bias``)"""
    mlp_bias: bool = False
    qk_norm: bool = False
    """RMSNorm over head_dim on q and k before rotary (Qwen3)"""
    rope_scaling: dict | None = None
    """HF ``rope_scaling`` (``rope_type`` llama3 or linear); None = plain rotary"""
    sliding_window: int | None = None
    """attention window (tokens); a layer refuses contexts beyond it (exact within it)"""


@dataclass(frozen=True)
class LlamaConfig(AttentionFields):
    """Llama-style dense decoder (GQA attention + SwiGLU FFN). Widths in features."""

    name: str
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ffn: int
    vocab_size: int
    rope_theta: float
    norm_eps: float = 1e-5
    max_seq_len: int = 8192
    """rotary table length = longest past + new tokens a layer accepts"""
    tie_embeddings: bool = False
    tiny: bool = False
    source: str = ""
    family: str = dataclasses.field(default="llama", init=False)

    @property
    def head_dim(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads


@dataclass(frozen=True)
class MoEConfig(AttentionFields):
    """MoE layer (see :class:`~tilewright.models.moe.MoELayer`) and, when ``n_heads`` is set, the
    Llama-style attention of the full decoder it sits in (Mixtral). ``n_heads=None`` means the
    attention is not Llama-style: none modeled, or MLA (:class:`DeepSeekConfig`)."""

    name: str
    d_model: int
    n_layers: int
    n_experts: int
    top_k: int
    d_expert_ffn: int
    n_shared_experts: int = 0
    router_score: Literal["softmax", "sigmoid"] = "softmax"
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.0
    n_group: int = 1
    topk_group: int = 1
    n_dense_layers: int = 0
    """leading layers with a dense FFN instead of MoE (DeepSeek-V3 ``first_k_dense_replace``)"""
    d_dense_ffn: int = 0
    n_heads: int | None = None
    n_kv_heads: int | None = None
    vocab_size: int | None = None
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    max_seq_len: int = 8192
    tiny: bool = False
    source: str = ""
    d_shared_ffn: int | None = None
    """width of the shared expert; None = n_shared_experts * d_expert_ffn (DeepSeek)"""
    shared_expert_gate: bool = False
    """the shared expert's output is scaled by sigmoid(Linear(d_model, 1) x) (Qwen2-MoE)"""
    tie_embeddings: bool = False
    family: str = dataclasses.field(default="moe", init=False)

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers

    @property
    def head_dim(self) -> int:
        if self.n_heads is None:
            raise ValueError(f"{self.name}: the attention of this model is not modeled")
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def shared_width(self) -> int:
        """features of the shared expert(s) (0: none)"""
        return self.d_shared_ffn if self.d_shared_ffn is not None \
            else self.n_shared_experts * self.d_expert_ffn


@dataclass(frozen=True)
class YarnScaling:
    """HF ``rope_scaling`` of type ``yarn`` (DeepSeek-V3: factor 40, original 4096 positions,
    beta_fast 32, beta_slow 1, mscale = mscale_all_dim = 1); used by
    :mod:`tilewright.models.mla`."""

    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 1.0
    mscale_all_dim: float = 1.0


@dataclass(frozen=True)
class DeepSeekConfig(MoEConfig):
    """DeepSeek-V2/V3 decoder: Multi-head Latent Attention (:mod:`tilewright.models.mla`) with
    ``n_attn_heads`` heads, then a dense SwiGLU FFN (``d_dense_ffn``) in the first
    ``n_dense_layers`` layers and the MoE FFN in the rest. ``n_heads`` stays None (the attention
    is not Llama-style). ``n_mtp_layers``: multi-token-prediction modules shipped beside the
    main model (not part of it; counted apart by :func:`param_count`)."""

    n_attn_heads: int = 0
    q_lora_rank: int = 0
    """0: queries not compressed (DeepSeek-V2-Lite)"""
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    yarn: YarnScaling | None = None
    n_mtp_layers: int = 0

    @property
    def kv_cache_elems_per_token(self) -> int:
        """Latent-cache elements per token per layer: ``kv_lora_rank + qk_rope_head_dim``."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class MambaConfig:
    """Mamba v1 LM: ``n_layers`` residual Mamba layers, tied embeddings, vocab padded up to a
    multiple of ``pad_vocab_size_multiple``."""

    name: str
    d_model: int
    n_layers: int
    vocab_size: int
    d_state: int = 16
    expand: int = 2
    d_conv: int = 4
    dt_rank: int | None = None
    """None = ceil(d_model / 16)"""
    pad_vocab_size_multiple: int = 8
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    tiny: bool = False
    source: str = ""
    family: str = dataclasses.field(default="mamba", init=False)

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    @property
    def rank(self) -> int:
        return math.ceil(self.d_model / 16) if self.dt_rank is None else self.dt_rank

    @property
    def padded_vocab(self) -> int:
        m = self.pad_vocab_size_multiple
        return -(-self.vocab_size // m) * m


@dataclass(frozen=True)
class Mamba2Config:
    """Mamba-2 (SSD) LM: ``n_layers`` residual Mamba-2 layers
    (:class:`~tilewright.models.ssm2.Mamba2Block`); ``vocab_size`` as stored (HF pads it)."""

    name: str
    d_model: int
    n_layers: int
    vocab_size: int
    d_state: int = 128
    expand: int = 2
    d_conv: int = 4
    head_dim: int = 64
    n_groups: int = 1
    norm_eps: float = 1e-5
    proj_bias: bool = False
    conv_bias: bool = True
    tie_embeddings: bool = True
    tiny: bool = False
    source: str = ""
    family: str = dataclasses.field(default="mamba2", init=False)

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    @property
    def n_heads(self) -> int:
        return self.d_inner // self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_groups * self.d_state

    @property
    def padded_vocab(self) -> int:
        return self.vocab_size


@dataclass(frozen=True)
class HybridConfig:
    """Jamba-style hybrid: layer ``i`` has attention when ``i % attn_period == attn_offset``
    (else a Mamba mixer with dt/B/C norms) and an MoE FFN when ``i % expert_period ==
    expert_offset`` (else a SwiGLU of ``d_ffn``); see :mod:`tilewright.models.hybrid`."""

    name: str
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ffn: int
    vocab_size: int
    n_experts: int
    top_k: int
    attn_period: int
    attn_offset: int
    expert_period: int
    expert_offset: int
    d_state: int = 16
    d_conv: int = 4
    expand: int = 2
    dt_rank: int = 256
    norm_eps: float = 1e-6
    max_seq_len: int = 262144
    tie_embeddings: bool = False
    tiny: bool = False
    source: str = ""
    family: str = dataclasses.field(default="hybrid", init=False)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    def kind(self, i: int) -> str:
        """``"attn-mlp"``, ``"attn-moe"``, ``"mamba-mlp"`` or ``"mamba-moe"`` for layer ``i``."""
        mixer = "attn" if i % self.attn_period == self.attn_offset else "mamba"
        return f"{mixer}-{'moe' if i % self.expert_period == self.expert_offset else 'mlp'}"


LLMConfig = Union[LlamaConfig, MoEConfig, MambaConfig, Mamba2Config, HybridConfig]


def unmodeled_fields(cfg: LLMConfig, *, head_dim: bool = False) -> list[str]:
    """The fields ``cfg`` sets that the cluster and mesh models do not model (they build their
    own plain Llama / MoE / Mamba layers): biases, q/k norm, a sliding window, the shared
    expert's gate or a width that is not whole experts, and with ``head_dim`` an explicit
    head_dim other than d_model / n_heads; Mamba-2 and hybrid configs as a whole. Empty for the
    built-in configs. Callers refuse a non-empty list by name."""
    if isinstance(cfg, (Mamba2Config, HybridConfig)):
        return [f"architecture family {cfg.family}"]
    out = []
    for name in ("qkv_bias", "o_bias", "mlp_bias", "qk_norm", "sliding_window",
                 "shared_expert_gate"):
        if getattr(cfg, name, None):
            out.append(f"{name} = {getattr(cfg, name)}")
    if isinstance(cfg, MoEConfig) and cfg.d_shared_ffn and cfg.d_shared_ffn % cfg.d_expert_ffn:
        out.append(f"d_shared_ffn = {cfg.d_shared_ffn} (not whole experts)")
    if head_dim and getattr(cfg, "d_head", None) and getattr(cfg, "n_heads", None) \
            and cfg.d_head * cfg.n_heads != cfg.d_model:
        out.append(f"head_dim = {cfg.d_head} (not d_model / n_heads)")
    return out


def layer_kinds(cfg: LLMConfig) -> dict[str, int]:
    """Distinct layer kinds of ``cfg`` and how many layers of each, in order of first use:
    ``{"layer": n_layers}`` for configs whose layers are all alike, the hybrid's kinds else."""
    if not isinstance(cfg, HybridConfig):
        return {"layer": cfg.n_layers}
    out: dict[str, int] = {}
    for i in range(cfg.n_layers):
        out[cfg.kind(i)] = out.get(cfg.kind(i), 0) + 1
    return out

_HF = "https://huggingface.co/"
LLM_CONFIGS: dict[str, LLMConfig] = {c.name: c for c in (
    LlamaConfig("llama3-8b", d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ffn=14336,
                vocab_size=128256, rope_theta=500000.0,
                source=_HF + "meta-llama/Meta-Llama-3-8B/blob/main/config.json"),
    LlamaConfig("llama3-70b", d_model=8192, n_layers=80, n_heads=64, n_kv_heads=8, d_ffn=28672,
                vocab_size=128256, rope_theta=500000.0,
                source=_HF + "meta-llama/Meta-Llama-3-70B/blob/main/config.json"),
    # the Llama 3 Herd of Models (arXiv:2407.21783) Table 3: 126 layers, d 16,384, FFN 53,248,
    # 128 heads, 8 KV heads; vocab and context from the released config
    LlamaConfig("llama3-405b", d_model=16384, n_layers=126, n_heads=128, n_kv_heads=8,
                d_ffn=53248, vocab_size=128256, rope_theta=500000.0, max_seq_len=131072,
                source=_HF + "meta-llama/Llama-3.1-405B/blob/main/config.json"),
    LlamaConfig("tiny-llama", d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ffn=128,
                vocab_size=256, rope_theta=10000.0, max_seq_len=256, tiny=True),
    MoEConfig("mixtral-8x7b", d_model=4096, n_layers=32, n_experts=8, top_k=2,
              d_expert_ffn=14336, n_heads=32, n_kv_heads=8, vocab_size=32000,
              rope_theta=1e6, max_seq_len=32768,
              source=_HF + "mistralai/Mixtral-8x7B-v0.1/blob/main/config.json"),
    DeepSeekConfig("deepseek-v3", d_model=7168, n_layers=61, n_experts=256, top_k=8,
                   d_expert_ffn=2048, n_shared_experts=1, router_score="sigmoid",
                   norm_topk_prob=True, routed_scaling_factor=2.5, n_group=8, topk_group=4,
                   n_dense_layers=3, d_dense_ffn=18432, vocab_size=129280, norm_eps=1e-6,
                   max_seq_len=163840, n_attn_heads=128, q_lora_rank=1536, kv_lora_rank=512,
                   qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                   yarn=YarnScaling(40.0, 4096, 32.0, 1.0, 1.0, 1.0), n_mtp_layers=1,
                   source=_HF + "deepseek-ai/DeepSeek-V3/blob/main/config.json"),
    DeepSeekConfig("tiny-deepseek", d_model=64, n_layers=3, n_experts=8, top_k=2,
                   d_expert_ffn=32, n_shared_experts=1, router_score="sigmoid",
                   routed_scaling_factor=2.5, n_group=4, topk_group=2, n_dense_layers=1,
                   d_dense_ffn=128, vocab_size=256, norm_eps=1e-6, max_seq_len=256,
                   n_attn_heads=4, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16,
                   qk_rope_head_dim=8, v_head_dim=16, yarn=YarnScaling(4.0, 64), tiny=True),
    MoEConfig("tiny-moe", d_model=64, n_layers=2, n_experts=4, top_k=2, d_expert_ffn=128,
              n_shared_experts=1, n_heads=4, n_kv_heads=2, vocab_size=256, max_seq_len=256,
              tiny=True),
    MoEConfig("tiny-moe-sigmoid", d_model=64, n_layers=2, n_experts=8, top_k=2,
              d_expert_ffn=32, n_shared_experts=1, router_score="sigmoid",
              routed_scaling_factor=2.5, n_group=4, topk_group=2, tiny=True),
    MambaConfig("mamba-130m", d_model=768, n_layers=24, vocab_size=50277,
                source=_HF + "state-spaces/mamba-130m/blob/main/config.json"),
    MambaConfig("mamba-2.8b", d_model=2560, n_layers=64, vocab_size=50277,
                source=_HF + "state-spaces/mamba-2.8b/blob/main/config.json"),
    MambaConfig("tiny-mamba", d_model=64, n_layers=2, vocab_size=256, d_state=8, tiny=True),
)}


def get_config(name: str) -> LLMConfig:
    """The config called ``name`` — a built-in name, or a Hugging Face ``config.json`` / a folder
    holding one (:func:`tilewright.models.hf_config.load_hf_config`, read once per process and
    kept under that text in :data:`FILE_CONFIGS`, not among the built-ins);
    :class:`ModelInputError` listing the known names otherwise."""
    if name in FILE_CONFIGS:
        return FILE_CONFIGS[name]
    if name not in LLM_CONFIGS:
        if _hf_config.looks_like_config(name):
            FILE_CONFIGS[name] = _hf_config.load_hf_config(name)
            return FILE_CONFIGS[name]
        raise ModelInputError(f"unknown LLM config {name!r}; known: "
                              f"{', '.join(builtin_names())}"
                              f" (or a Hugging Face config.json, or a folder holding one)")
    return LLM_CONFIGS[name]


#: configs read from config.json files this process, by the text that named them
FILE_CONFIGS: dict[str, "LLMConfig"] = {}


def builtin_names() -> list[str]:
    """The built-in config names, sorted."""
    return sorted(LLM_CONFIGS)


# ---- analytic shapes and counts -----------------------------------------------------------------
def _swiglu(d: int, f: int) -> int:
    return 3 * d * f


def _attention(d: int, h: int, hkv: int, hd: int) -> int:
    return 2 * d * h * hd + 2 * d * hkv * hd


def _attention_cfg(cfg: "LlamaConfig | MoEConfig") -> int:
    """Attention parameters of one layer of ``cfg`` with its biases and q/k norms."""
    h, hkv, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    n = _attention(cfg.d_model, h, hkv, hd)
    n += (h + 2 * hkv) * hd if cfg.qkv_bias else 0
    n += cfg.d_model if cfg.o_bias else 0
    return n + (2 * hd if cfg.qk_norm else 0)


def param_count(name: str) -> dict[str, int | None]:
    """Parameter counts computed from the config by formula (independent of the modules):

    ``layer`` (one layer as built by :func:`build_llm`), ``total`` (full model incl. embedding
    and LM head; None if not modeled), ``active`` (parameters touched per token: for MoE only the
    top-k routed experts count; None if not modeled).
    """
    cfg = get_config(name)
    d = cfg.d_model
    if isinstance(cfg, LlamaConfig):
        mlp = _swiglu(d, cfg.d_ffn) + ((2 * cfg.d_ffn + d) if cfg.mlp_bias else 0)
        layer = _attention_cfg(cfg) + mlp + 2 * d
        emb = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2)
        total = cfg.n_layers * layer + emb + d
        return {"layer": layer, "total": total, "active": total}
    if isinstance(cfg, DeepSeekConfig):
        return _deepseek_params(cfg)
    if isinstance(cfg, MoEConfig):
        expert = _swiglu(d, cfg.d_expert_ffn)
        moe = d * cfg.n_experts + cfg.n_experts * expert + _swiglu(d, cfg.shared_width) \
            + (d if cfg.shared_width and cfg.shared_expert_gate else 0)
        if cfg.n_heads is None:
            return {"layer": moe, "total": None, "active": None}
        layer = _attention_cfg(cfg) + moe + 2 * d
        emb = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2)
        total = cfg.n_layers * layer + emb + d
        active = total - cfg.n_layers * (cfg.n_experts - cfg.top_k) * expert
        return {"layer": layer, "total": total, "active": active}
    if isinstance(cfg, HybridConfig):
        di, n, r, h, hkv, hd = (cfg.d_inner, cfg.d_state, cfg.dt_rank, cfg.n_heads,
                                cfg.n_kv_heads, cfg.head_dim)
        mixers = {"attn": _attention(d, h, hkv, hd),
                  "mamba": (d * 2 * di + di * cfg.d_conv + di + di * (r + 2 * n) + r * di + di
                            + di * n + di + di * d + r + 2 * n)}
        expert = _swiglu(d, cfg.d_ffn)
        ffns = {"mlp": expert, "moe": d * cfg.n_experts + cfg.n_experts * expert}
        kinds = layer_kinds(cfg)
        per = {k: mixers[k.split("-")[0]] + ffns[k.split("-")[1]] + 2 * d for k in kinds}
        emb = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2)
        total = sum(per[k] * c for k, c in kinds.items()) + emb + d
        n_moe = sum(c for k, c in kinds.items() if k.endswith("moe"))
        return {"layer": per[next(iter(kinds))], "total": total,
                "active": total - n_moe * (cfg.n_experts - cfg.top_k) * expert}
    if isinstance(cfg, Mamba2Config):
        di, h, c, k = cfg.d_inner, cfg.n_heads, cfg.conv_dim, cfg.d_conv
        b = 1 if cfg.proj_bias else 0
        layer = ((d + b) * (di + c + h) + c * k + (c if cfg.conv_bias else 0) + 3 * h + di
                 + (di + b) * d + d)
        total = cfg.n_layers * layer + cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2) + d
        return {"layer": layer, "total": total, "active": total}
    di, n, r = cfg.d_inner, cfg.d_state, cfg.rank
    layer = (d * 2 * di + di * cfg.d_conv + di + di * (r + 2 * n) + r * di + di
             + di * n + di + di * d + d)
    total = cfg.n_layers * layer + cfg.padded_vocab * d * (1 if cfg.tie_embeddings else 2) + d
    return {"layer": layer, "total": total, "active": total}


def _mla(cfg: DeepSeekConfig) -> int:
    """MLA parameters of one layer (:class:`~tilewright.models.mla.MLAttention`)."""
    d, h, r = cfg.d_model, cfg.n_attn_heads, cfg.kv_lora_rank
    qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    q = (d * cfg.q_lora_rank + cfg.q_lora_rank + cfg.q_lora_rank * h * qk) if cfg.q_lora_rank \
        else d * h * qk
    return (q + d * (r + cfg.qk_rope_head_dim) + r + r * h * (cfg.qk_nope_head_dim + cfg.v_head_dim)
            + h * cfg.v_head_dim * d)


def _deepseek_params(cfg: DeepSeekConfig) -> dict[str, int | None]:
    """:func:`param_count` of a DeepSeek-V2/V3 config; ``layer`` is one MoE decoder layer (MLA +
    MoE + 2 norms), ``active`` counts the top-k routed experts only (embedding table and LM head
    included), ``active_no_embedding`` the same without the embedding table (a row lookup),
    ``mtp`` one multi-token-prediction module each (a MoE decoder layer, the ``eh_proj``
    [2D -> D] and 3 norms; it shares the main model's embedding and head) x ``n_mtp_layers``,
    not in ``total``."""
    d = cfg.d_model
    expert = _swiglu(d, cfg.d_expert_ffn)
    moe = d * cfg.n_experts + cfg.n_experts * expert \
        + _swiglu(d, cfg.n_shared_experts * cfg.d_expert_ffn)
    attn = _mla(cfg) + 2 * d
    layer, dense = attn + moe, attn + _swiglu(d, cfg.d_dense_ffn)
    emb = cfg.vocab_size * d
    total = cfg.n_moe_layers * layer + cfg.n_dense_layers * dense + 2 * emb + d
    active = total - cfg.n_moe_layers * (cfg.n_experts - cfg.top_k) * expert
    mtp = cfg.n_mtp_layers * (layer + 2 * d * d + 3 * d)
    return {"layer": layer, "dense_layer": dense, "total": total, "active": active,
            "active_no_embedding": active - emb, "mtp": mtp}


# hf_config builds the dataclasses defined above: imported last, it finds them all (a module
# object, so the names are looked up when get_config runs)
import tilewright.models.hf_config as _hf_config  # noqa: E402
